// gloo_allreduce.cc -- gloo's AllReduce measured the way all_reduce_perf measures shardkit's.
//
// People who simulate several devices on one machine today often use gloo (PyTorch's CPU
// backend). This program gives bench/compare a gloo number to put next to shardkit's threads
// backend: N gloo ranks run as threads of one process, meet through an in-memory store
// (gloo::rendezvous::HashStore) and talk over gloo's TCP transport on 127.0.0.1 -- the setup
// gloo's own test suite uses for in-process ranks. Every rank gets its own TCP device, so each
// rank has its own event-loop thread, as separate processes would.
//
// Per swept size (float, sum) every available gloo AllReduce algorithm is tried:
//   ring, ring_chunked, halving_doubling   the algorithm classes (in place)
//   fn_ring, fn_bcube                      gloo::allreduce() with AllreduceOptions set to
//                                          RING / BCUBE (out of place)
//   bcube                                  the AllreduceBcube class: only when asked for (-a),
//                                          see kDefaultAlgos
// Each algorithm gets its own gloo context, i.e. its own TCP connections: gloo's TCP pair
// sizes SO_SNDBUF from the first message it sends, so the small notifications of the
// algorithm classes leave some sockets with a locked minimal send buffer, and a later fn_ring
// on the same connections then trickles 64 KiB per wake-up (16 MiB at 3+ ranks: 15 s instead of
// 0.1 s). Separate connections measure each algorithm as a user who picked it would see it.
// Each one: a check run (fresh inputs, one call, every element compared with the exact sum),
// `-w` warm-up calls, a barrier, `-n` timed calls. A rank's time is its mean per call; an
// algorithm's time is the maximum over ranks (as in all_reduce_perf). The row shows the best
// algorithm's time and name: gloo leaves the choice to its caller, so the fair peer is gloo
// with the best choice made for it. #wrong sums the wrong elements of every algorithm over
// every rank; any wrong element makes the exit status 1.
//
// Output columns follow nccl-tests' AllReduce table (size count type redop root time algbw
// busbw #wrong), with the algorithm's name last, so bench/compare parses it like
// all_reduce_perf's out-of-place columns. busbw = algbw * 2(N-1)/N.
//
// Build: g++ -std=c++17 -O2 bench/gloo_allreduce.cc -o build/gloo_allreduce -lgloo -lpthread
// (Debian: libgloo-dev).

#include <gloo/allreduce.h>
#include <gloo/allreduce_bcube.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/config.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <getopt.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Options {
  size_t min_bytes = 8, max_bytes = 16u << 20, factor = 2;
  int ranks = 2, warmup = 5, iters = 20, check = 1, verbose = 0;
  double prune = 3; // 0: time every algorithm
  std::vector<std::string> algos; // empty: every algorithm that applies
};

// In the order tried. The usually fast ones go first, so that pruning (-p) has a best time to
// compare the slow ones' first call with.
const char* const kAllAlgos[] = {"fn_ring", "fn_bcube", "halving_doubling", "ring_chunked", "ring", "bcube"};

// The AllreduceBcube class of gloo 0.5.0 (Debian's libgloo-dev; upstream has the same run())
// is left out by default: called back to back, as any training loop or benchmark does, a rank
// that has finished one call and starts the next can overwrite data a slower peer has not
// consumed yet. The element check catches it at 8 ranks on a loaded machine (half of one
// rank's elements wrong in roughly one run in three); gloo::allreduce's BCUBE (fn_bcube) is
// unaffected and stays in.
const char* const kDefaultAlgos[] = {"fn_ring", "fn_bcube", "halving_doubling", "ring_chunked", "ring"};

void usage(FILE* f, const char* argv0) {
  std::fprintf(f,
      "Usage: %s [-b minbytes] [-e maxbytes] [-f factor] [-g ranks] [-w warmup] [-n iters] [-c 0|1] [-a algos] [-p x] [-v]\n"
      "  gloo AllReduce (float, sum) with N ranks as threads over TCP on 127.0.0.1, nccl-tests-style table.\n"
      "  -b,--minbytes <size>   smallest size, K/M/G suffixes = powers of 2 (default 8)\n"
      "  -e,--maxbytes <size>   largest size (default 16M)\n"
      "  -f,--stepfactor <n>    multiply the size by n each step, n >= 2 (default 2)\n"
      "  -g,--ranks <n>         gloo ranks (threads), >= 1 (default 2)\n"
      "  -w,--warmup_iters <n>  untimed calls per size and algorithm (default 5)\n"
      "  -n,--iters <n>         timed calls per size and algorithm, >= 1 (default 20)\n"
      "  -c,--check <0|1>       check every element of one fresh call (default 1)\n"
      "  -a,--algos <list>      comma-separated subset of: ring ring_chunked halving_doubling bcube\n"
      "                         fn_ring fn_bcube (default: all but bcube, whose back-to-back calls\n"
      "                         race in this gloo; bcube and fn_bcube only for a power-of-2 rank count)\n"
      "  -p,--prune <x>         skip the timed calls of an algorithm whose first call took more than\n"
      "                         x times the best mean so far at this size (default 3; 0 = never)\n"
      "  -v,--verbose           also print every algorithm's time as a '#' line\n"
      "  -h,--help              this text\n"
      "  The row shows the fastest algorithm at that size; exit status 1 if any element was wrong.\n",
      argv0);
}

// Sizes in bytes with K/M/G meaning powers of 2, as all_reduce_perf reads them.
bool parse_size(const char* s, size_t* out) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (end == s || errno) return false;
  int shift = 0;
  switch (*end) {
    case 'K': case 'k': shift = 10; end++; break;
    case 'M': case 'm': shift = 20; end++; break;
    case 'G': case 'g': shift = 30; end++; break;
    default: break;
  }
  if (*end != '\0') return false;
  *out = (size_t)v << shift;
  return true;
}

bool parse_double(const char* s, double* out) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (end == s || *end || !(v >= 0)) return false;
  *out = v;
  return true;
}

bool parse_int(const char* s, int lo, int* out) {
  char* end = nullptr;
  long v = std::strtol(s, &end, 10);
  if (end == s || *end || v < lo || v > 1 << 30) return false;
  *out = (int)v;
  return true;
}

// The ranks are threads of one process, so an in-process barrier is enough to line up the
// timed sections (it is not part of what is measured).
class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  void wait() {
    std::unique_lock<std::mutex> lk(m_);
    const unsigned long gen = gen_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      gen_++;
      cv_.notify_all();
    } else {
      cv_.wait(lk, [&] { return gen_ != gen; });
    }
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int n_, arrived_ = 0;
  unsigned long gen_ = 0;
};

// Input of rank r at element i. Small integers, so every partial sum is exact in float and the
// expected result has a closed form; the period 61 (prime) catches misplaced blocks.
inline float input_of(int r, size_t i) { return (float)(r + 1 + (int)(i % 61)); }
inline float expected_of(int n, size_t i) { return (float)(n * (n + 1) / 2 + n * (int)(i % 61)); }

bool is_pow2(int n) { return n > 0 && (n & (n - 1)) == 0; }

bool wanted(const Options& o, const std::string& name) {
  if (o.algos.empty())
    return std::find(std::begin(kDefaultAlgos), std::end(kDefaultAlgos), name) != std::end(kDefaultAlgos);
  return std::find(o.algos.begin(), o.algos.end(), name) != o.algos.end();
}

// What the ranks share: per-algorithm per-rank times and wrong counts of the current size.
struct Shared {
  explicit Shared(const Options& o, size_t nalgos)
      : barrier(o.ranks), secs(nalgos, std::vector<double>(o.ranks, 0.0)),
        first(nalgos, std::vector<double>(o.ranks, 0.0)),
        wrong(nalgos, std::vector<size_t>(o.ranks, 0)) {}
  gloo::rendezvous::HashStore store;
  Barrier barrier;
  std::vector<std::vector<double>> secs;  // mean per timed call; +inf when pruned
  std::vector<std::vector<double>> first; // the first call at this size (check or warm-up)
  std::vector<std::vector<size_t>> wrong;
  size_t total_wrong = 0; // over every size; written by rank 0 only
};

// The best mean time (max over ranks) among the correct algorithms before `a` at this size.
double best_so_far(const Shared& sh, size_t a, int ranks) {
  double best = std::numeric_limits<double>::infinity();
  for (size_t b = 0; b < a; b++) {
    size_t w = 0;
    for (int r = 0; r < ranks; r++) w += sh.wrong[b][r];
    if (!w) best = std::min(best, *std::max_element(sh.secs[b].begin(), sh.secs[b].end()));
  }
  return best;
}

// One context (full mesh of connections) per algorithm; see the top of this file. The prefix
// keeps the contexts' rendezvous keys apart in the one store.
std::vector<std::shared_ptr<gloo::rendezvous::Context>> connect_all(const Options& o,
                                                                    const std::vector<std::string>& algos,
                                                                    Shared& sh, int rank,
                                                                    std::shared_ptr<gloo::transport::Device> dev) {
  std::vector<std::shared_ptr<gloo::rendezvous::Context>> ctxs;
  for (const std::string& name : algos) {
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, o.ranks); // bcube base 2
    // 8 ranks' event loops on 2 shared cores can stall one call for seconds; the default 30 s
    // would turn a slow machine into a spurious failure.
    ctx->setTimeout(std::chrono::seconds(600));
    gloo::rendezvous::PrefixStore store(name, sh.store);
    ctx->connectFullMesh(store, dev);
    ctxs.push_back(ctx);
  }
  return ctxs;
}

// One algorithm set up for one size: a class instance (in place on buf) or the function form's
// options (buf to out). The classes register their pair buffers when constructed, so one object
// per size is built (by every rank, in the same order) and called again and again; the
// function form's options are likewise reusable across calls.
struct Instance {
  std::unique_ptr<gloo::Algorithm> algo;
  std::unique_ptr<gloo::AllreduceOptions> opts;
  bool in_place = true;
  void call() {
    if (algo) algo->run(); else gloo::allreduce(*opts);
  }
};

Instance make_instance(const std::string& name, const std::shared_ptr<gloo::rendezvous::Context>& ctx,
                       std::vector<float>& buf, std::vector<float>& out, size_t count, size_t tag) {
  Instance in;
  std::vector<float*> ptrs{buf.data()};
  in.in_place = name.compare(0, 3, "fn_") != 0;
  if (name == "ring") {
    in.algo.reset(new gloo::AllreduceRing<float>(ctx, ptrs, (int)count));
  } else if (name == "ring_chunked") {
    in.algo.reset(new gloo::AllreduceRingChunked<float>(ctx, ptrs, (int)count));
  } else if (name == "halving_doubling") {
    in.algo.reset(new gloo::AllreduceHalvingDoubling<float>(ctx, ptrs, (int)count));
  } else if (name == "bcube") {
    in.algo.reset(new gloo::AllreduceBcube<float>(ctx, ptrs, (int)count));
  } else {
    in.opts.reset(new gloo::AllreduceOptions(ctx));
    in.opts->setAlgorithm(name == "fn_ring" ? gloo::AllreduceOptions::Algorithm::RING
                                            : gloo::AllreduceOptions::Algorithm::BCUBE);
    in.opts->setInput(buf.data(), count);
    in.opts->setOutput(out.data(), count);
    void (*sum)(void*, const void*, const void*, size_t) = &gloo::sum<float>;
    in.opts->setReduceFunction(sum);
    in.opts->setTag((uint32_t)tag);
  }
  return in;
}

double seconds_of(Instance& in) {
  const auto t0 = std::chrono::steady_clock::now();
  in.call();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Algorithm a at one size on this rank: the check, the warm-up, the pruning verdict and the
// timed calls; publishes its figures in sh. Returns whether a was pruned (the same on every rank).
bool time_algorithm(const Options& o, Shared& sh, int rank, size_t a, Instance& in, std::vector<float>& buf,
                    std::vector<float>& out, size_t count) {
  float* result = in.in_place ? buf.data() : out.data();
  double first = 0;
  if (o.check) {
    for (size_t i = 0; i < count; i++) buf[i] = input_of(rank, i);
    if (!in.in_place) std::fill(out.begin(), out.begin() + count, std::nanf(""));
    first = seconds_of(in);
    size_t bad = 0;
    for (size_t i = 0; i < count; i++) bad += result[i] != expected_of(o.ranks, i);
    sh.wrong[a][rank] = bad;
  }
  // In place, every call multiplies the data by N; after a few dozen calls it would reach
  // inf. Zeros stay zeros and cost the same to add, so the timed calls run on zeros.
  std::fill(buf.begin(), buf.begin() + count, 0.0f);
  // No barrier between the check and the warm-up: back-to-back calls with unequal ranks
  // are what exposes an algorithm that lets a fast rank run ahead into a slow one's data.
  for (int i = 0; i < o.warmup; i++) {
    const double t = seconds_of(in);
    if (i == 0 && !o.check) first = t;
  }
  sh.first[a][rank] = first;
  sh.barrier.wait();
  // Pruning: an algorithm whose first call (max over ranks) is already several times the
  // best mean so far cannot win; at 8 ranks the ring class takes seconds per 16 MiB call
  // where another algorithm takes 0.2 s. Every rank reads the same published numbers after
  // the same barrier, so all reach the same verdict without talking.
  bool pruned = false;
  if (o.prune > 0 && (o.check || o.warmup > 0)) {
    const double f = *std::max_element(sh.first[a].begin(), sh.first[a].end());
    pruned = f > o.prune * best_so_far(sh, a, o.ranks);
  }
  if (pruned) {
    sh.secs[a][rank] = std::numeric_limits<double>::infinity();
  } else {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < o.iters; i++) in.call();
    const auto t1 = std::chrono::steady_clock::now();
    sh.secs[a][rank] = std::chrono::duration<double>(t1 - t0).count() / o.iters;
  }
  // The barrier both publishes every rank's numbers (rank 0 prints the row after this size's
  // last algorithm) and keeps the next size's buffers from overwriting them.
  sh.barrier.wait();
  return pruned;
}

// Rank 0's row for one size: the fastest correct algorithm's time (max over ranks), nccl-tests'
// columns, then the algorithm's name; with -v every algorithm's figure before it.
void print_row(const Options& o, const std::vector<std::string>& algos, Shared& sh, const std::vector<char>& pruned,
               size_t count) {
  double best = std::numeric_limits<double>::infinity();
  size_t best_a = 0, wrong = 0;
  for (size_t a = 0; a < algos.size(); a++) {
    const double t = *std::max_element(sh.secs[a].begin(), sh.secs[a].end());
    size_t w = 0;
    for (size_t x : sh.wrong[a]) w += x;
    wrong += w;
    sh.total_wrong += w;
    if (o.verbose && pruned[a])
      std::printf("#   %12zu  %-17s    pruned      #wrong %zu  (first call %.2f us)\n", count * sizeof(float),
                  algos[a].c_str(), w, *std::max_element(sh.first[a].begin(), sh.first[a].end()) * 1e6);
    else if (o.verbose)
      std::printf("#   %12zu  %-17s %10.2f us  #wrong %zu\n", count * sizeof(float), algos[a].c_str(), t * 1e6, w);
    if (w == 0 && t < best) { best = t; best_a = a; }
  }
  if (!(best < std::numeric_limits<double>::infinity())) best = 0; // every algorithm wrong
  const double size = (double)(count * sizeof(float));
  const double algbw = best > 0 ? size / best / 1e9 : 0;
  const double busbw = algbw * 2.0 * (o.ranks - 1) / o.ranks;
  const double us = best * 1e6;
  std::printf("%12zu  %12zu  %8s  %6s  %6d  %7.*f  %6.2f  %6.2f  %5zu  %s\n", count * sizeof(float), count, "float",
              "sum", -1, us < 1e4 ? 2 : 1, us, algbw, busbw, wrong, algos[best_a].c_str());
  std::fflush(stdout);
}

void run_rank(const Options& o, const std::vector<std::string>& algos, Shared& sh, int rank) {
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  auto ctxs = connect_all(o, algos, sh, rank, dev);
  const size_t max_count = std::max<size_t>(1, o.max_bytes / sizeof(float));
  std::vector<float> buf(max_count), out(max_count); // out: fn_* only (out of place)
  std::vector<char> pruned(algos.size()); // this size's verdicts (the same on every rank)
  for (size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.factor) {
    const size_t count = std::max<size_t>(1, bytes / sizeof(float));
    for (size_t a = 0; a < algos.size(); a++) {
      Instance in = make_instance(algos[a], ctxs[a], buf, out, count, a);
      pruned[a] = time_algorithm(o, sh, rank, a, in, buf, out, count);
    }
    if (rank == 0) print_row(o, algos, sh, pruned, count);
    sh.barrier.wait(); // wrong[][] and secs[][] are rewritten by the next size
    if (bytes > o.max_bytes / o.factor) break; // no overflow past max_bytes
  }
  // Close before the threads end (as gloo's tests do): it sets SO_LINGER, so no TIME_WAIT
  // sockets pile up over the many runs of bench/compare.
  sh.barrier.wait();
  if (o.ranks > 1)
    for (auto& ctx : ctxs) ctx->closeConnections();
}



// -a's comma-separated list into o.algos; false after naming an unknown algorithm.
bool parse_algos(const char* argv0, const char* arg, Options& o) {
  std::string s(arg);
  for (size_t p = 0; p <= s.size();) {
    size_t q = s.find(',', p);
    if (q == std::string::npos) q = s.size();
    std::string name = s.substr(p, q - p);
    if (std::find(std::begin(kAllAlgos), std::end(kAllAlgos), name) == std::end(kAllAlgos)) {
      std::fprintf(stderr, "%s: unknown algorithm '%s'\n", argv0, name.c_str());
      return false;
    }
    o.algos.push_back(name);
    p = q + 1;
  }
  return true;
}

// The options into o. Returns -1 to go on, else the exit status (0 after --help, 2 on a bad one).
int parse_args(int argc, char** argv, Options& o) {
  static const struct option longopts[] = {
      {"minbytes", required_argument, nullptr, 'b'}, {"maxbytes", required_argument, nullptr, 'e'},
      {"stepfactor", required_argument, nullptr, 'f'}, {"ranks", required_argument, nullptr, 'g'},
      {"warmup_iters", required_argument, nullptr, 'w'}, {"iters", required_argument, nullptr, 'n'},
      {"check", required_argument, nullptr, 'c'}, {"algos", required_argument, nullptr, 'a'},
      {"prune", required_argument, nullptr, 'p'}, {"verbose", no_argument, nullptr, 'v'}, {"help", no_argument, nullptr, 'h'},
      {nullptr, 0, nullptr, 0}};
  int c, f = 2;
  bool ok = true;
  while (ok && (c = getopt_long(argc, argv, "b:e:f:g:w:n:c:a:p:vh", longopts, nullptr)) != -1) {
    switch (c) {
      case 'b': ok = parse_size(optarg, &o.min_bytes); break;
      case 'e': ok = parse_size(optarg, &o.max_bytes); break;
      case 'f': ok = parse_int(optarg, 2, &f); o.factor = (size_t)f; break;
      case 'g': ok = parse_int(optarg, 1, &o.ranks); break;
      case 'w': ok = parse_int(optarg, 0, &o.warmup); break;
      case 'n': ok = parse_int(optarg, 1, &o.iters); break;
      case 'c': ok = parse_int(optarg, 0, &o.check) && o.check <= 1; break;
      case 'p': ok = parse_double(optarg, &o.prune); break;
      case 'v': o.verbose = 1; break;
      case 'a':
        if (!parse_algos(argv[0], optarg, o)) return 2;
        break;
      case 'h': usage(stdout, argv[0]); return 0;
      default: ok = false; break;
    }
  }
  if (!ok || optind != argc || o.min_bytes == 0 || o.min_bytes > o.max_bytes ||
      o.max_bytes / sizeof(float) > (size_t)std::numeric_limits<int>::max()) {
    usage(stderr, argv[0]);
    return 2;
  }
  return -1;
}

// The algorithms to try. bcube (both forms) is only exercised by gloo's tests for a rank count
// that is a power of its base (2 here); elsewhere it is left out rather than reported as a slow
// or wrong peer.
std::vector<std::string> choose_algos(const Options& o) {
  std::vector<std::string> algos;
  for (const char* name : kAllAlgos) {
    const std::string s(name);
    if (!wanted(o, s)) continue;
    if ((s == "bcube" || s == "fn_bcube") && !is_pow2(o.ranks)) continue;
    algos.push_back(s);
  }
  return algos;
}

void print_header(const Options& o, const std::vector<std::string>& algos) {
  std::printf("# gloo_allreduce: gloo %d.%d.%d, %d ranks as threads of one process, TCP on 127.0.0.1\n",
              GLOO_VERSION_MAJOR, GLOO_VERSION_MINOR, GLOO_VERSION_PATCH, o.ranks);
  std::printf("# minBytes %zu maxBytes %zu step: %zu(factor) warmup iters: %d iters: %d validation: %d prune: %g\n",
              o.min_bytes, o.max_bytes, o.factor, o.warmup, o.iters, o.check, o.prune);
  std::printf("# algorithms tried per size:");
  for (const auto& s : algos) std::printf(" %s", s.c_str());
  std::printf("; the row shows the fastest\n#\n");
  std::printf("#%11s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %s\n", "size", "count", "type", "redop", "root",
              "time", "algbw", "busbw", "#wrong", "algorithm");
  std::printf("#%11s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s\n", "(B)", "(elements)", "", "", "", "(us)",
              "(GB/s)", "(GB/s)", "");
  std::fflush(stdout);
}

} // namespace

int main(int argc, char** argv) {
  Options o;
  int status = parse_args(argc, argv, o);
  if (status >= 0) return status;
  std::vector<std::string> algos = choose_algos(o);
  if (algos.empty()) {
    std::fprintf(stderr, "%s: no algorithm applies to %d ranks\n", argv[0], o.ranks);
    return 2;
  }
  print_header(o, algos);
  Shared sh(o, algos.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < o.ranks; r++) {
    threads.emplace_back([&, r] {
      try {
        run_rank(o, algos, sh, r);
      } catch (const std::exception& e) {
        // The other ranks would wait for this one until gloo's timeout; end the process now.
        std::fprintf(stderr, "gloo_allreduce: rank %d: %s\n", r, e.what());
        std::fflush(stderr);
        std::_Exit(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  if (sh.total_wrong) {
    std::printf("# gloo_allreduce: %zu wrong elements\n", sh.total_wrong);
    return 1;
  }
  return 0;
}
