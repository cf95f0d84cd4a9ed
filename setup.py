"Package metadata comes from settings.ini (nbdev's single source); extras split the model-free core from the ML stack."
from configparser import ConfigParser
import setuptools

cfg = ConfigParser(delimiters=['='])
cfg.read('settings.ini', encoding='utf-8')
cfg = cfg['DEFAULT']
req = lambda key: cfg.get(key, '').split()

extras = {'train': req('train_requirements'), 'pipeline': req('pipeline_requirements'), 'dev': req('dev_requirements'),
          'ifbench': req('ifbench_requirements'), 'vllm': ['vllm>=0.26,<0.27'], 'kernels': req('kernels_requirements'),
          'core-test': req('core_test_requirements')}
extras['all'] = extras['train'] + extras['pipeline'] + extras['dev'] + extras['ifbench']
# the data the library reads without a profile ships inside the package (in a clone, rsi_repro/data/* link to data/*)
PACKAGE_DATA = ['data/pools/*', 'data/prompts/*', 'data/claims/*']

setuptools.setup(
    name=cfg['lib_name'], version=cfg['version'], description=cfg['description'],
    long_description=open('README.md', encoding='utf-8').read(), long_description_content_type='text/markdown',
    author=cfg['author'], author_email=cfg['author_email'], license='Apache-2.0', url=cfg['git_url'],
    packages=setuptools.find_packages(include=['rsi_repro', 'rsi_repro.*']), include_package_data=True,
    package_data={'rsi_repro': PACKAGE_DATA},
    python_requires='>=' + cfg['min_python'],
    classifiers=[f'Programming Language :: Python :: {v}' for v in req('tested_pythons')], install_requires=req('requirements'), extras_require=extras,
    entry_points={'console_scripts': cfg['console_scripts'].split(), 'nbdev': [f"{cfg['lib_path']}={cfg['lib_path']}._modidx:d"]},
    zip_safe=False)
