#!/usr/bin/env bash
# STAND-IN for the QAIRT SDK's check-linux-dependency.sh (see ../README.md): checks nothing.
echo "qairt stand-in: check-linux-dependency.sh checks nothing"
