"""Run one of the Python binding's test modules for ctest.

    python3 tests/python/run.py MODULE [REQUIRED_IMPORT...]

Exits 77 (ctest's SKIP_RETURN_CODE) when a required module (numpy, torch:
Debian's python3-numpy, python3-torch) cannot be imported, saying which;
else runs MODULE's unittest cases and exits 0 when all pass, 1 otherwise.
The ferry package and libferry come from PYTHONPATH and FERRY_LIB, which
tests/python/CMakeLists.txt sets.
"""
import importlib
import os
import sys
import unittest

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
module, required = sys.argv[1], sys.argv[2:]
for name in required:
    try:
        importlib.import_module(name)
    except ImportError as e:
        print(f"{module}: needs {name} ({e}); apt-get install python3-{name}", file=sys.stderr)
        sys.exit(77)
suite = unittest.defaultTestLoader.loadTestsFromName(module)
result = unittest.TextTestRunner(verbosity=2).run(suite)
sys.exit(0 if result.wasSuccessful() and result.testsRun > 0 else 1)
