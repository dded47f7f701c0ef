"Setup for tpas_nb, read from settings.ini (nbdev 2 template, without pkg_resources)."
from configparser import ConfigParser
import setuptools, shlex

assert setuptools.__version__ >= '36.2'

config = ConfigParser(delimiters=['='])
config.read('settings.ini', encoding='utf-8')
cfg = config['DEFAULT']

expected = ('version description keywords author author_email license status min_python '
            'audience language lib_name user').split()
for o in expected: assert o in cfg, f'missing expected setting: {o}'
setup_cfg = {o: cfg[o] for o in 'version description keywords author author_email'.split()}

licenses = {'apache2': ('Apache Software License 2.0', 'OSI Approved :: Apache Software License')}
statuses = ['1 - Planning', '2 - Pre-Alpha', '3 - Alpha', '4 - Beta', '5 - Production/Stable',
            '6 - Mature', '7 - Inactive']
py_versions = '3.10 3.11 3.12 3.13'.split()

requirements = shlex.split(cfg.get('requirements', ''))
dev_requirements = shlex.split(cfg.get('dev_requirements', ''))
lic = licenses[cfg['license'].lower()]
min_python = cfg['min_python']
lib_path = cfg.get('lib_path', cfg['lib_name'])
console_scripts = [s.strip() for s in cfg.get('console_scripts', '').split('\n') if s.strip()]

setuptools.setup(
    name=cfg['lib_name'],
    license=lic[0],
    classifiers=['Development Status :: ' + statuses[int(cfg['status'])],
                 'Intended Audience :: ' + cfg['audience'].title(),
                 'Natural Language :: ' + cfg['language'].title(),
                 'License :: ' + lic[1]]
                + ['Programming Language :: Python :: ' + o for o in py_versions[py_versions.index(min_python):]],
    url=cfg['git_url'],
    packages=setuptools.find_packages(include=[lib_path, lib_path + '.*']),
    include_package_data=True,
    install_requires=requirements,
    extras_require={'dev': dev_requirements},
    python_requires='>=' + cfg['min_python'],
    long_description=open('README.md', encoding='utf-8').read(),
    long_description_content_type='text/markdown',
    zip_safe=False,
    entry_points={'console_scripts': console_scripts,
                  'nbdev': [f'{cfg.get("lib_path")}={cfg.get("lib_path")}._modidx:d']},
    **setup_cfg)
