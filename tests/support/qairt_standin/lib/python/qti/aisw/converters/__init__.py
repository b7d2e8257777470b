"""STAND-IN for the QAIRT SDK's converter package (see tests/support/qairt_standin/README.md).

It exists so that the stand-in converter, like the real one, only runs when PYTHONPATH includes
$QNN_SDK_ROOT/lib/python (what envsetup.sh sets up)."""
