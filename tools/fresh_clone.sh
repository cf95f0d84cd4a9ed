# Sourced by tools/time_demo.sh and tools/time_test.sh: a fresh clone of this checkout's commit, set up as the README
# tells a new user. `fresh_clone_installed CLONE_DIR` removes CLONE_DIR, clones into it, enters it and runs `make install`,
# timed; it sets `here` (this checkout), `commit` and `setup` (seconds of `make install`).
fresh_clone_installed() {
  local clone=$1
  here=$PWD; commit=$(git rev-parse --short HEAD)
  [ -z "$(git status --porcelain --untracked-files=no)" ] || echo "note: uncommitted changes are not in the clone; it times $commit"
  rm -rf "$clone"; git clone -q "$here" "$clone"; cd "$clone"
  local t=$SECONDS; make install > install.log 2>&1; setup=$((SECONDS - t))
}
