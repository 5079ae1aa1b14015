#!/usr/bin/env bash
# What the network lock (src/engine/net/netlock.cc) costs to load for N connections, in the form
# cairn uses (one set of local.port.remote.port per address family, one drop rule per direction)
# and in the form it replaced (one drop rule per connection and direction): `nft -f` wall time,
# REPS times each, alternating, then the table deleted. Then what lifting it costs: the rules
# flushed (what a dump does before the thaw) against the table deleted (after it), one table alone
# and PAR tables at once (the ranks of a group on one node). Needs root and nftables.
#
#   sudo bash bench/nft_lock.sh [CONNS]     (default: 1000; PAR=3)
set -euo pipefail
conns=${1:-1000}
reps=${REPS:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"; for t in $(nft list tables | awk "/cairn_bench/ {print \\$3}"); do nft delete table inet "$t"; done 2>/dev/null || true' EXIT
{
  echo "table inet cairn_bench {"
  echo "  set conns4 {"
  echo "    type ipv4_addr . inet_service . ipv4_addr . inet_service"
  printf '    elements = { '
  for ((i = 0; i < conns; i++)); do
    ((i > 0)) && printf ',\n      '
    printf '127.0.0.1 . %d . 127.0.0.1 . 6379' $((20000 + i))
  done
  printf ' }\n  }\n'
  echo "  chain input {"
  echo "    type filter hook input priority -300; policy accept;"
  echo "    ip daddr . tcp dport . ip saddr . tcp sport @conns4 drop"
  echo "  }"
  echo "  chain output {"
  echo "    type filter hook output priority -300; policy accept;"
  echo "    ip saddr . tcp sport . ip daddr . tcp dport @conns4 drop"
  echo "  }"
  echo "}"
} >"$work/set.nft"
{
  echo "table inet cairn_bench {"
  echo "  chain input {"
  echo "    type filter hook input priority -300; policy accept;"
  for ((i = 0; i < conns; i++)); do
    echo "    ip saddr 127.0.0.1 ip daddr 127.0.0.1 tcp sport 6379 tcp dport $((20000 + i)) drop"
  done
  echo "  }"
  echo "  chain output {"
  echo "    type filter hook output priority -300; policy accept;"
  for ((i = 0; i < conns; i++)); do
    echo "    ip saddr 127.0.0.1 ip daddr 127.0.0.1 tcp sport $((20000 + i)) tcp dport 6379 drop"
  done
  echo "  }"
  echo "}"
} >"$work/rules.nft"
now() { date +%s.%N; }
echo "| form | connections | nft -f s | delete s |"
echo "|---|---:|---:|---:|"
for _ in $(seq "$reps"); do
  for form in set rules; do
    t0=$(now)
    nft -f "$work/$form.nft"
    t1=$(now)
    nft delete table inet cairn_bench
    t2=$(now)
    printf '| %s | %d | %.3f | %.3f |\n' "$form" "$conns" "$(echo "$t1 - $t0" | bc)" "$(echo "$t2 - $t1" | bc)"
  done
done

par=${PAR:-3}
load() { sed "s/cairn_bench/cairn_bench$1/" "$work/set.nft" | nft -f -; }
ms() { echo "($2 - $1) * 1000" | bc; }
echo
echo "| lifting | tables at once | ms each |"
echo "|---|---:|---|"
for _ in $(seq "$reps"); do
  for how in flush delete; do
    load 0
    t0=$(now); nft "$how" table inet cairn_bench0; t1=$(now)
    [ "$how" = flush ] && nft delete table inet cairn_bench0
    printf '| %s | 1 | %.0f |\n' "$how" "$(ms "$t0" "$t1")"
    for i in $(seq "$par"); do load "$i"; done
    for i in $(seq "$par"); do (a=$(now); nft "$how" table inet "cairn_bench$i"; b=$(now); ms "$a" "$b" >"$work/t$i") & done
    wait
    [ "$how" = flush ] && for i in $(seq "$par"); do nft delete table inet "cairn_bench$i"; done
    printf '| %s | %d | %s |\n' "$how" "$par" "$(for i in $(seq "$par"); do printf '%.0f ' "$(cat "$work/t$i")"; done)"
  done
done
