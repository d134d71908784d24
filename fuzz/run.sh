#!/usr/bin/env bash
# Run every fuzz target for SECONDS each (default 20) on the kept corpus, on the stable
# toolchain (RUSTC_BOOTSTRAP=1 lets it take the -Z flags cargo-fuzz passes).
#
#   fuzz/run.sh [SECONDS_PER_TARGET]
#
# Environment: FUZZ_TARGETS="a b" runs only those; FUZZ_SANITIZER=none|address (default
# address); FUZZ_TIMEOUT seconds one input may take before it counts as a hang (default 30).
# New inputs go to a scratch directory, so fuzz/corpus/ does not grow; a crash leaves its
# input in fuzz/artifacts/TARGET/ and makes the script exit non-zero.
# Needs: rustup's stable toolchain, a C++ compiler (libFuzzer is built from source by
# libfuzzer-sys: Debian's g++ or clang), and cargo-fuzz (installed here when missing).
set -euo pipefail

secs="${1:-20}"
case "$secs" in
'' | *[!0-9]*)
    echo "usage: $0 [SECONDS_PER_TARGET]" >&2
    exit 2
    ;;
esac
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
export RUSTC_BOOTSTRAP=1
sanitizer="${FUZZ_SANITIZER:-address}"
timeout_s="${FUZZ_TIMEOUT:-30}"

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked
fi

targets="${FUZZ_TARGETS:-$(cargo fuzz list)}"
echo "fuzz: building ($sanitizer sanitizer): $(echo $targets)" >&2
cargo fuzz build --sanitizer "$sanitizer" >&2

scratch="$(mktemp -d "${TMPDIR:-/tmp}/vetto-fuzz.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
# The targets' own directories (a project, a bundle, a state root) go there too.
mkdir -p "$scratch/tmp"
export TMPDIR="$scratch/tmp"
failed=()
for t in $targets; do
    mkdir -p "$scratch/corpus/$t" "corpus/$t" "artifacts/$t"
    log="$scratch/$t.log"
    # The scratch directory first: libFuzzer writes new inputs to the first corpus only.
    if cargo fuzz run --sanitizer "$sanitizer" "$t" "$scratch/corpus/$t" "corpus/$t" -- \
        -max_total_time="$secs" -timeout="$timeout_s" -rss_limit_mb=4096 \
        -print_final_stats=1 >"$log" 2>&1; then
        runs="$(sed -n 's/^Done \([0-9]*\) runs in.*/\1/p' "$log" | tail -1)"
        echo "fuzz: $t ok (${runs:-?} runs)"
        stat() { sed -n "s/^stat::$1: *//p" "$log" | tail -1; }
        echo "  $(stat average_exec_per_sec) runs/s, $(stat new_units_added) new inputs," \
            "peak RSS $(stat peak_rss_mb) MB" >&2
        cp "$log" "artifacts/$t/last.log"
    else
        failed+=("$t")
        echo "fuzz: $t FAILED" >&2
        grep -E "panicked|ERROR|SUMMARY|Test unit written|Base64" "$log" | head -20 >&2 || true
        cp "$log" "artifacts/$t/last.log"
        echo "  (full log: fuzz/artifacts/$t/last.log)" >&2
    fi
done
if ((${#failed[@]})); then
    echo "fuzz: ${#failed[@]} target(s) failed: ${failed[*]}" >&2
    exit 1
fi
