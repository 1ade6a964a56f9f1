"""Run by meson (configure time) with the python3 the build found: says where `meson install`
will put the gmlake package and whether that python3 reads it; where it does not, prints the
PYTHONPATH that makes it importable.

    site_notice.py DIR      (DIR: the package's parent folder, as installed)
"""
import os
import site
import sys

d = os.path.normpath(sys.argv[1])
real = os.path.realpath(d)
looked = [p for p in sys.path[1:] if p] + site.getsitepackages()
if site.ENABLE_USER_SITE:
    looked.append(site.getusersitepackages())
if any(os.path.realpath(p) == real for p in looked):
    print("gmlake: the Python package is installed in %s, which %s reads (import gmlake)"
          % (d, sys.executable))
else:
    print("gmlake: the Python package is installed in %s, which %s does not read; to import gmlake:\n"
          "  export PYTHONPATH=%s\n"
          "(or meson configure BUILD -Dpython_dir=DIR before installing, DIR a folder on its sys.path,\n"
          "e.g. the output of: python3 -c 'import sysconfig; print(sysconfig.get_path(\"purelib\"))')"
          % (d, sys.executable, d))
