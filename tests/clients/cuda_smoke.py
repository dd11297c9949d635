"""cuda_smoke.py LIBFERRY_CUDA: python/ferry/cuda.py finds the libferry_cuda
beside the libferry.so the package loaded ($FERRY_LIB: this build's) and
probes the device without raising, GPU or not (ctest clients_cuda_python)."""
import os
import sys

import ferry
import ferry.cuda as fc

want = sys.argv[1]
got = fc.library_path()
if got is None or not os.path.samefile(got, want):
    sys.exit(f"ferry.cuda loaded {got!r}, not this build's {want}")
ok = fc.available()
if ok not in (True, False):
    sys.exit(f"available() returned {ok!r}")
print(f"ferry.cuda: {got} (beside {ferry.library_path()}), available: {ok}")
