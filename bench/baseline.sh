# Sourced by the bench scripts: builds the ringpipe binary of a git revision in a worktree of its
# own (reused while it is at that revision) and prints its path; and the median of numbers.
#   BASE=$(baseline_binary 0b37b01 /tmp/ringpipe-baseline)
baseline_binary() {
  local ref=$1 dir=$2
  if [ ! -x "$dir/build/release/apps/ringpipe" ] ||
     [ "$(git -C "$dir" rev-parse HEAD 2>/dev/null)" != "$(git rev-parse "$ref")" ]; then
    rm -rf "$dir"
    git worktree prune
    git worktree add --detach "$dir" "$ref" >/dev/null
    (cd "$dir" && cmake --preset release >/dev/null &&
       cmake --build --preset release -j "$(nproc)" --target ringpipe >/dev/null)
  fi
  echo "$dir/build/release/apps/ringpipe"
}

# The median of the numbers on standard input, one a line (of an even count, the mean of the two
# middle ones).
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
