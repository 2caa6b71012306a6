#!/usr/bin/env bash
# Keeps docs/c-api.md true to include/kcsi.h: every exported function and every result code
# (with its number) appears in both, and the docs name no function the header lacks.
set -uo pipefail
cd "$(dirname "$0")/.."
header=include/kcsi.h doc=docs/c-api.md
bad=0

header_fns=$(grep -oE '^[a-z0-9_ ]*[ *]kcsi_[a-z0-9_]+\(' "$header" | grep -oE 'kcsi_[a-z0-9_]+' | sort -u)
doc_fns=$(grep -oE '\bkcsi_[a-z0-9_]+\(' "$doc" | grep -oE 'kcsi_[a-z0-9_]+' | sort -u)
for f in $header_fns; do
  grep -qE "\`$f[(\`]|\b$f," "$doc" || { echo "$doc does not describe $f" >&2; bad=1; }
done
for f in $doc_fns; do
  grep -qx "$f" <<<"$header_fns" || { echo "$doc names $f, which $header does not declare" >&2; bad=1; }
done
while read -r name value; do
  grep -qE "^\| \`$name\` \| $value \|" "$doc" || { echo "$doc lacks the row: | \`$name\` | $value |" >&2; bad=1; }
done < <(grep -oE '^#define (KCSI_OK|KCSI_ERR_[A-Z_]+) [0-9]+' "$header" | cut -d' ' -f2-)

[ $bad = 0 ] && echo "docs/c-api.md matches include/kcsi.h"
exit $bad
