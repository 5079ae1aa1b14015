#include "engine/restore/fd_moves.h"

#include <deque>
#include <map>

#include "absl/strings/str_format.h"

namespace cairn::restore {

absl::StatusOr<std::vector<FdCall>> PlanFdCalls(const std::set<int>& masters, const std::vector<FdTarget>& targets,
                                                const std::set<int>& pinned, int limit) {
  constexpr int kPlaced = -2;  // a number holding its final descriptor
  std::map<int, int> holder;   // number -> the master there (by its first number), or kPlaced
  std::map<int, int> at;       // master -> the number it is at now
  std::map<int, int> uses;     // master -> targets still to place from it
  std::map<int, const FdTarget*> pending;  // number -> the target to place there
  std::vector<FdCall> calls;
  for (int m : masters) holder[m] = at[m] = m;
  for (const FdTarget& t : targets) {
    if (masters.count(t.master) == 0) {
      return absl::InternalError(absl::StrFormat("fd %d comes from master %d, which is not there", t.fd, t.master));
    }
    if (pending.count(t.fd) != 0 || (holder.count(t.fd) != 0 && holder[t.fd] == kPlaced)) {
      return absl::InternalError(absl::StrFormat("fd %d is wanted twice", t.fd));
    }
    if (t.fd == t.master) {  // the master is already where this descriptor goes
      holder[t.fd] = kPlaced;
      if (!t.cloexec) calls.push_back({FdCall::kClearCloexec, 0, t.fd});
      continue;
    }
    pending[t.fd] = &t;
    ++uses[t.master];
  }
  // A number is free to take its target when nothing is there or only a master no longer needed.
  auto takeable = [&](int n) {
    auto h = holder.find(n);
    return h == holder.end() || (h->second != kPlaced && uses[h->second] == 0);
  };
  std::deque<int> ready;
  for (const auto& [n, t] : pending) {
    if (takeable(n)) ready.push_back(n);
  }
  int cursor = 3;  // free numbers for masters moved aside are looked for from here, upwards
  while (!pending.empty()) {
    while (!ready.empty()) {
      int n = ready.front();
      ready.pop_front();
      auto p = pending.find(n);
      if (p == pending.end() || !takeable(n)) continue;
      const FdTarget& t = *p->second;
      pending.erase(p);
      calls.push_back({FdCall::kDup3, at[t.master], n, t.cloexec});
      holder[n] = kPlaced;
      if (--uses[t.master] == 0) {
        // Its own number may be some descriptor's, waiting for it to be used up.
        int s = at[t.master];
        if (holder[s] == t.master && pending.count(s) != 0) ready.push_back(s);
      }
    }
    if (pending.empty()) break;
    // Every number still wanted holds a master still needed: move one such master aside.
    int n = pending.begin()->first;
    int x = holder[n];
    // Free: nothing there, or a master no longer needed (no descriptor of this process wants it).
    auto spare = [&](int c) {
      if (pending.count(c) != 0 || pinned.count(c) != 0) return false;
      auto h = holder.find(c);
      return h == holder.end() || (h->second != kPlaced && uses[h->second] == 0);
    };
    while (cursor < limit && !spare(cursor)) ++cursor;
    if (cursor >= limit) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "no descriptor number below %d is free to move a master aside while putting descriptors in place", limit));
    }
    calls.push_back({FdCall::kDup3, n, cursor, true});
    holder[cursor] = x;
    at[x] = cursor;
    holder.erase(n);
    ready.push_back(n);
    ++cursor;
  }
  for (const auto& [n, h] : holder) {
    if (h != kPlaced) calls.push_back({FdCall::kClose, 0, n});
  }
  return calls;
}

}  // namespace cairn::restore
