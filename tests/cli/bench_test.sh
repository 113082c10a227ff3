#!/usr/bin/env bash
# `tessera bench` and `tessera objbench` on small sizes against temp dirs:
# exit codes, the rows of their tables, clear errors, and nothing left behind.
# Usage: bench_test.sh TESSERA_BINARY
set -uo pipefail
T=$(realpath "$1")
W=$(mktemp -d /tmp/tessera-bench.XXXXXX)
trap 'chmod -R u+w "$W"; rm -rf "$W"' EXIT
passed=0
failed=0

pass() { passed=$((passed + 1)); }
fail() {
  failed=$((failed + 1))
  echo "FAIL $*"
}

# expect_rows NAME FILE ROW...: FILE has a table line starting with "| ROW ".
expect_rows() {
  local name=$1 file=$2
  shift 2
  local row
  for row in "$@"; do
    if grep -qE "^\| $row +\|" "$file"; then pass; else fail "$name: no row '$row' in: $(cat "$file")"; fi
  done
}

# expect_fail NAME PATTERN CMD...: non-zero exit, one "tessera: " line on stderr matching PATTERN.
expect_fail() {
  local name=$1 pattern=$2
  shift 2
  local err rc
  err=$("$@" 2>&1 >/dev/null)
  rc=$?
  if [ $rc -ne 0 ] && [ "$(printf '%s\n' "$err" | grep -c '^tessera: ')" -eq 1 ] &&
    grep -qiE "$pattern" <<<"$err"; then pass; else fail "$name: rc=$rc stderr=<$err>"; fi
}

# bench on a local directory.
mkdir "$W/fs"
if "$T" bench "$W/fs" -p 2 --big-file-size 4 --small-file-size 16 --small-file-count 5 >"$W/bench.out" 2>"$W/bench.err"; then
  pass
else
  fail "bench exit code $?: $(cat "$W/bench.err")"
fi
expect_rows bench "$W/bench.out" "Write big file" "Read big file" "Write small files" "Read small files" "Stat small files"
if grep -q "Write big file.*100.0%" "$W/bench.err"; then pass; else fail "bench progress: $(cat "$W/bench.err")"; fi
if [ -z "$(ls -A "$W/fs")" ]; then pass; else fail "bench left files: $(ls -A "$W/fs")"; fi

"$T" bench "$W/fs" --big-file-size 0 --small-file-count 3 >"$W/small.out" 2>/dev/null || fail "bench small files only"
if ! grep -q "big file" "$W/small.out"; then pass; else fail "bench --big-file-size 0 still ran the big file"; fi

expect_fail "bench missing path" "no such file" "$T" bench "$W/nope"
touch "$W/file"
expect_fail "bench path is a file" "not a directory" "$T" bench "$W/file"
mkdir "$W/ro"
chmod 555 "$W/ro"
if [ "$(id -u)" -ne 0 ]; then
  expect_fail "bench read-only dir" "cannot write" "$T" bench "$W/ro"
elif id nobody >/dev/null 2>&1; then
  # root writes anywhere: check as nobody (W is mode 700, so open it up for the test).
  chmod 755 "$W"
  expect_fail "bench read-only dir" "cannot write" su nobody -s /bin/bash -c '"$0" bench "$1"' "$T" "$W/ro"
  chmod 700 "$W"
fi
expect_fail "bench bad thread count" "threads" "$T" bench "$W/fs" -p 0

# objbench on a local directory bucket.
if "$T" objbench --storage file --bucket "$W/bucket" --block-size 256 --big-object-size 2 --small-object-size 4 \
  --small-objects 20 -p 3 >"$W/obj.out" 2>"$W/obj.err"; then
  pass
else
  fail "objbench exit code $?: $(cat "$W/obj.err")"
fi
checks=("create a bucket" "put an object" "get an object" "get a range in the middle" "get a range past the end"
  "head an object" "get a missing object" "head a missing object" "delete an object" "delete a missing object"
  "list with a prefix" "list with a limit" "list page by page" "list a missing prefix" "put an empty object"
  "overwrite an object")
for c in "${checks[@]}"; do
  if grep -qE "^\| $c +\| PASS +\|" "$W/obj.out"; then pass; else fail "objbench check '$c' did not pass"; fi
done
expect_rows objbench "$W/obj.out" "put big object" "get big object" "put small objects" "get small objects" \
  "list small objects" "head small objects" "delete small objects"
if [ -z "$(find "$W/bucket" -mindepth 1)" ]; then pass; else fail "objbench left: $(find "$W/bucket" -mindepth 1)"; fi

"$T" objbench --storage memory --bucket mem --big-object-size 1 --small-objects 5 >/dev/null 2>&1 || fail "objbench memory"

# A bucket that is a regular file: the checks fail, no performance table, exit 1.
"$T" objbench --storage file --bucket "$W/file" --big-object-size 1 >"$W/bad.out" 2>"$W/bad.err"
rc=$?
if [ $rc -eq 1 ] && grep -q "| FAIL" "$W/bad.out" && ! grep -q "put big object" "$W/bad.out" &&
  grep -q "functional check(s) failed" "$W/bad.err"; then pass; else fail "objbench on a file: rc=$rc $(cat "$W/bad.out" "$W/bad.err")"; fi
expect_fail "objbench unknown storage" "storage" "$T" objbench --storage nosuch --bucket "$W/b2"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
