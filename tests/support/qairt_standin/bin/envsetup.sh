# STAND-IN for the QAIRT SDK's envsetup.sh (see ../README.md): sets what the real one sets for the tools.
_standin_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export QNN_SDK_ROOT="$_standin_root"
export PATH="$QNN_SDK_ROOT/bin/x86_64-linux-clang:$PATH"
export LD_LIBRARY_PATH="$QNN_SDK_ROOT/lib/x86_64-linux-clang${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$QNN_SDK_ROOT/lib/python${PYTHONPATH:+:$PYTHONPATH}"
unset _standin_root
