#!/usr/bin/env bash
# Deletes the kind cluster test/kind/up.sh made.
set -euo pipefail
kind delete cluster --name objfuse
