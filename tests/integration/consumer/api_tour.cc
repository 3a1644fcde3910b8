// Uses every part of ps-lite's public API that programs commonly touch, the
// way a ps-lite program would (only "ps/ps.h", ps-lite's names), and checks
// the results. Built both in the tree and, by install_test.sh, as an outside
// project against the installed package.

#include <cmath>

#include "ps/ps.h"

using namespace ps;  // As ps-lite programs do.

namespace {

// ps-lite's slicer contract: cut by the given ranges, slice i -> server i.
void RangeSlicer(const KVPairs<float>& send, const std::vector<Range>& ranges,
                 KVWorker<float>::SlicedKVs* sliced) {
  sliced->resize(ranges.size());
  for (size_t i = 0; i < ranges.size(); ++i) {
    Range r = FindRange(send.keys, ranges[i].begin(), ranges[i].end());
    auto& kv = (*sliced)[i].second;
    (*sliced)[i].first = r.size() > 0;
    kv.keys = send.keys.segment(r.begin(), r.end());
    if (!send.vals.empty()) {
      size_t k = send.vals.size() / send.keys.size();
      kv.vals = send.vals.segment(r.begin() * k, r.end() * k);
    }
  }
}

void RunWorker() {
  const int rank = MyRank();
  CHECK_GE(rank, 0);
  CHECK_LT(rank, NumWorkers());
  KVWorker<float> kv(0, 0);

  // Push / Pull / PushPull with std::vector.
  std::vector<Key> keys = {1, 5, 9, kMaxKey / 2, kMaxKey - 1};
  std::vector<float> vals = {1, 2, 3, 4, 5};
  kv.Wait(kv.Push(keys, vals));
  Postoffice::Get()->Barrier(0, kWorkerGroup);
  std::vector<float> got;
  kv.Wait(kv.Pull(keys, &got));
  for (size_t i = 0; i < keys.size(); ++i) {
    CHECK_EQ(got[i], NumWorkers() * vals[i]) << "key " << keys[i];
  }
  Postoffice::Get()->Barrier(0, kWorkerGroup);

  // Z-variants with SArray, several values per key, a callback, priority.
  SArray<Key> zkeys = {Key(100 + rank), Key(200 + rank), Key(300 + rank)};
  SArray<float> zvals(zkeys.size() * 2, 1.0f);
  bool called = false;
  int ts = kv.ZPush(
      zkeys, zvals, {}, 0, [&called] { called = true; }, 1);
  kv.Wait(ts);
  CHECK(called);

  // ps-lite's custom slicer over GetServerKeyRanges().
  const std::vector<Range>& ranges = Postoffice::Get()->GetServerKeyRanges();
  CHECK_EQ(static_cast<int>(ranges.size()), NumServers());
  KVWorker<float> sliced(1, 0);
  sliced.set_slicer(RangeSlicer);
  std::vector<Key> skeys;
  for (const Range& r : ranges) skeys.push_back(r.begin() + 100 + rank);
  std::vector<float> svals(skeys.size(), 2.0f), souts;
  sliced.Wait(sliced.PushPull(skeys, svals, &souts));
  for (float v : souts) CHECK_EQ(v, 2.0f);

  // ZPushPull and ZPull with lengths.
  KVWorker<float> var(2, 0);
  SArray<Key> vkeys = {Key(10 + rank), Key(1000 + rank)};
  SArray<float> vv = {1, 2, 3};
  SArray<int> vlens = {1, 2};
  SArray<float> vout;
  var.Wait(var.ZPushPull(vkeys, vv, &vout, &vlens));
  SArray<float> pulled;
  SArray<int> plens;
  var.Wait(var.ZPull(vkeys, &pulled, &plens));
  CHECK_EQ(plens.size(), 2u);
  CHECK_EQ(plens[0], 1);
  CHECK_EQ(plens[1], 2);
  CHECK_EQ(pulled[2], 3.0f);
  LL << "api_tour: worker " << rank << " done";
}

}  // namespace

int main(int argc, char* argv[]) {
  (void)argc;
  Start(0, argv[0]);
  CHECK(IsWorker() || IsServer() || IsScheduler());
  CHECK_EQ(Postoffice::Get()->GetNodeIDs(kServerGroup).size(),
           static_cast<size_t>(NumServers()));
  CHECK_EQ(Postoffice::WorkerRankToID(0), 9);
  CHECK_EQ(Postoffice::ServerRankToID(1), 10);
  CHECK_EQ(Postoffice::IDtoRank(10), 1);
  if (IsServer()) {
    for (int app = 0; app < 3; ++app) {
      auto* server = new KVServer<float>(app);
      server->set_request_handle(KVServerDefaultHandle<float>());
      RegisterExitCallback([server] { delete server; });
    }
  }
  SimpleApp simple(7, 0);
  if (IsWorker()) {
    simple.Wait(simple.Request(3, "hi", kServerGroup + kWorkerGroup));
    RunWorker();
  }
  Finalize(0, true);
  return 0;
}
