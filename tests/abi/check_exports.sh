#!/usr/bin/env bash
# Fails when libferry.so exports a symbol outside the public API (include/ferry/): it lists
# each stray and counts them. The public API is namespace ferry (not its private namespaces
# detail, sys, shim, doctor, test), the typeinfo and vtables of its types, and the linker's own
# markers.
set -euo pipefail
lib="$1"
all=$(nm -DC --defined-only "$lib" | sed -E 's/^[0-9a-f]+ [A-Za-z] //')
strays=$(printf '%s\n' "$all" | grep -vE \
  '^(_init|_fini|_edata|_end|__bss_start)$' |
  grep -vE '^((typeinfo|typeinfo name|vtable|VTT) for )?ferry::' || true)
private=$(printf '%s\n' "$all" | grep -E '(^|for )ferry::(detail|sys|shim|doctor|test)::' || true)
strays=$(printf '%s\n%s\n' "$strays" "$private" | sed '/^$/d' | sort -u)
total=$(printf '%s\n' "$all" | sed '/^$/d' | wc -l)
if [ -n "$strays" ]; then
  count=$(printf '%s\n' "$strays" | wc -l)
  echo "libferry.so exports $count symbol(s) outside the public API (of $total):"
  printf '  %s\n' "$strays" | head -100
  exit 1
fi
echo "libferry.so exports $total symbols, all of the public API"
