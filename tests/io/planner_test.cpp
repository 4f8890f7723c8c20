// The planner's rules, one table row each, from facts alone: no /proc, no cuFile, no GPU.
#include "io/planner.hpp"

#include <gtest/gtest.h>

#include <algorithm>

namespace ferry::detail {
namespace {

struct probes {
    double cached = 1.0;
    std::optional<unavailable_reason> direct;
    bool nvidia_fs = false;
    std::optional<unavailable_reason> cufile;
    std::optional<std::pair<int, int>> nvfs;
};

plan_facts facts(memory_kind m, const probes& p, int* asked_cufile = nullptr) {
    plan_facts f;
    f.memory = m;
    f.size = std::size_t(1) << 30;
    f.threads = 16;
    f.gds_threshold = 1 << 20;
    f.staging_buffers = 2;
    f.staging_buffer_size = 2 << 20;
    f.cached_fraction = [p] { return p.cached; };
    f.nvidia_fs_loaded = [p] { return p.nvidia_fs; };
    f.nvfs_version = [p] { return p.nvfs; };
    // The local file's alternatives, found by their roles as the engine finds them.
    f.alternatives.push_back({alternative_for(alternative_role::page_cache_bypass), [p] { return p.direct; }});
    f.alternatives.push_back({alternative_for(alternative_role::device_dma), [p, asked_cufile] {
                                  if (asked_cufile) ++*asked_cufile;
                                  return p.cufile;
                              }});
    return f;
}

void without(plan_facts& f, alternative_role role) {
    std::erase_if(f.alternatives, [role](const plan_facts::offer& o) { return o.entry->role == role; });
}

std::vector<reason_code> codes(const plan_result& r) {
    std::vector<reason_code> v;
    for (const auto& x : r.reasons) v.push_back(x.code);
    return v;
}

TEST(planner, host_memory_reads_buffered_with_pread) {
    int asked = 0;
    plan_result r = plan_route(facts(memory_kind::host, {}, &asked));
    EXPECT_EQ(r.chosen.source, "posix");
    EXPECT_EQ(r.chosen.how, mover::host);
    EXPECT_EQ(r.chosen.counted_as, io_path::host);
    ASSERT_EQ(r.reasons.size(), 1u);
    EXPECT_EQ(r.reasons[0].text, "host memory: parallel pread on 16 threads");
    EXPECT_EQ(asked, 0) << "a read into host memory never asks cuFile";
}

TEST(planner, pinned_memory_writes_with_pwrite) {
    plan_facts f = facts(memory_kind::pinned, {});
    f.dir = direction::write;
    f.direct_io = direct_io_mode::on;  // writes never use O_DIRECT
    plan_result r = plan_route(f);
    EXPECT_EQ(r.chosen.counted_as, io_path::host);
    EXPECT_EQ(codes(r), std::vector<reason_code>{reason_code::host_memory});
    EXPECT_EQ(r.reasons[0].text, "pinned memory: parallel pwrite on 16 threads");
}

TEST(planner, direct_io_on_reads_host_memory_with_o_direct) {
    plan_facts f = facts(memory_kind::host, {});
    f.direct_io = direct_io_mode::on;
    plan_result r = plan_route(f);
    EXPECT_EQ(r.chosen.source, "direct");
    EXPECT_EQ(r.chosen.counted_as, io_path::direct);
    EXPECT_EQ(codes(r), (std::vector<reason_code>{reason_code::host_memory, reason_code::direct_io_on}));
}

TEST(planner, direct_io_auto_follows_page_cache_residency) {
    probes cold;
    cold.cached = 0.2;
    plan_facts f = facts(memory_kind::host, cold);
    f.direct_io = direct_io_mode::auto_;
    plan_result r = plan_route(f);
    EXPECT_EQ(r.chosen.counted_as, io_path::direct);
    EXPECT_EQ(r.reasons[1].code, reason_code::residency);
    EXPECT_EQ(r.reasons[1].text, "20% of the file is in the page cache: O_DIRECT reads");

    probes hot;
    hot.cached = 0.9;
    f = facts(memory_kind::host, hot);
    f.direct_io = direct_io_mode::auto_;
    r = plan_route(f);
    EXPECT_EQ(r.chosen.counted_as, io_path::host);
    EXPECT_EQ(r.reasons[1].text, "90% of the file is in the page cache: buffered reads");

    probes unknown;
    unknown.cached = -1;
    f = facts(memory_kind::host, unknown);
    f.direct_io = direct_io_mode::auto_;
    r = plan_route(f);
    EXPECT_EQ(r.chosen.counted_as, io_path::host);
    EXPECT_EQ(r.reasons[1].code, reason_code::residency_unknown);
}

TEST(planner, unusable_o_direct_reads_buffered_with_its_reason) {
    probes p;
    p.direct = unavailable_reason{.text = "the file system refuses O_DIRECT (open: EINVAL)",
                                  .cause = reason_code::direct_io_unsupported_fs};
    plan_facts f = facts(memory_kind::device, p);
    f.direct_io = direct_io_mode::on;
    f.gds = gds_mode::off;
    plan_result r = plan_route(f);
    EXPECT_EQ(r.chosen.counted_as, io_path::staged);
    EXPECT_EQ(r.reasons[1].code, reason_code::direct_unusable);
    EXPECT_EQ(r.reasons[1].text, "O_DIRECT unusable: the file system refuses O_DIRECT (open: EINVAL)");
    // The probe's cause travels with the rule, as the public plan carries both.
    EXPECT_EQ(r.reasons[1].cause, reason_code::direct_io_unsupported_fs);
    ASSERT_EQ(r.codes().size(), r.reasons.size());
    EXPECT_EQ(to_string(r.codes()[1].code), "direct_unusable");
    EXPECT_EQ(to_string(r.codes()[1].cause), "direct_io_unsupported_fs");
}

TEST(planner, managed_memory_is_staged) {
    plan_result r = plan_route(facts(memory_kind::managed, {}));
    EXPECT_EQ(r.chosen.how, mover::staged);
    EXPECT_EQ(codes(r), (std::vector<reason_code>{reason_code::managed_memory, reason_code::staging}));
    EXPECT_EQ(r.reasons[1].text, "staged: 16 threads, 2 x 2 MiB pinned buffers each");
    EXPECT_EQ(r.reasons[1].detail, "16 threads, 2 x 2 MiB pinned buffers each") << "the doctor's summary uses it";
}

TEST(planner, gds_off_is_staged_and_o_direct_makes_it_staged_direct) {
    plan_facts f = facts(memory_kind::device, {});
    f.gds = gds_mode::off;
    f.direct_io = direct_io_mode::on;
    plan_result r = plan_route(f);
    EXPECT_EQ(r.chosen.source, "direct");
    EXPECT_EQ(r.chosen.counted_as, io_path::staged_direct);
    EXPECT_EQ(r.reasons[1].text, "FERRY_GDS=off");
}

TEST(planner, small_requests_are_staged) {
    plan_facts f = facts(memory_kind::device, {});
    f.size = 4097;
    plan_result r = plan_route(f);
    EXPECT_EQ(r.chosen.counted_as, io_path::staged);
    EXPECT_EQ(r.reasons[0].text, "request of 4097 bytes is below FERRY_GDS_THRESHOLD (1 MiB)");
    EXPECT_FALSE(r.reasons[0].fallback);
}

TEST(planner, auto_without_nvidia_fs_falls_back_to_staged) {
    int asked = 0;
    plan_result r = plan_route(facts(memory_kind::device, {}, &asked));
    EXPECT_EQ(r.chosen.counted_as, io_path::staged);
    EXPECT_EQ(r.reasons[0].code, reason_code::no_nvidia_fs);
    EXPECT_TRUE(r.reasons[0].fallback);
    EXPECT_EQ(asked, 0) << "cuFile is not even loaded";
}

TEST(planner, unusable_cufile_falls_back_or_is_refused_under_gds_on) {
    probes p;
    p.nvidia_fs = true;
    p.cufile = unavailable_reason{.text = "cuFileHandleRegister failed with error 5027 (x)",
                                  .code = 5027,
                                  .cause = reason_code::cufile_register_failed};
    plan_result r = plan_route(facts(memory_kind::device, p));
    EXPECT_EQ(r.chosen.counted_as, io_path::staged);
    EXPECT_EQ(r.reasons[0].code, reason_code::cufile_unusable);
    EXPECT_EQ(r.reasons[0].cause, reason_code::cufile_register_failed);
    EXPECT_EQ(r.reasons[0].text, "GPUDirect Storage unusable: cuFileHandleRegister failed with error 5027 (x)");
    EXPECT_TRUE(r.reasons[0].fallback);
    EXPECT_FALSE(r.refusal);

    plan_facts on = facts(memory_kind::device, p);
    on.gds = gds_mode::on;
    r = plan_route(on);
    ASSERT_TRUE(r.refusal);
    EXPECT_EQ(r.refusal->code, 5027);
    EXPECT_EQ(r.refusal->text, "FERRY_GDS=on but cuFile cannot be used: cuFileHandleRegister failed with error 5027 (x)");
}

TEST(planner, nvidia_fs_makes_it_gds) {
    probes p;
    p.nvidia_fs = true;
    p.nvfs = std::pair<int, int>(2, 17);
    plan_result r = plan_route(facts(memory_kind::device, p));
    EXPECT_EQ(r.chosen.source, "cufile");
    EXPECT_EQ(r.chosen.how, mover::device_dma);
    EXPECT_EQ(r.chosen.counted_as, io_path::gds);
    EXPECT_EQ(r.reasons[0].text, "GPUDirect Storage: cuFile with nvidia-fs 2.17");
}

TEST(planner, compatibility_mode_only_when_asked_for) {
    probes p;
    p.nvidia_fs = true;
    plan_result r = plan_route(facts(memory_kind::device, p));
    EXPECT_EQ(r.chosen.counted_as, io_path::staged);
    EXPECT_EQ(r.reasons[0].code, reason_code::cufile_compat_slower);
    EXPECT_TRUE(r.reasons[0].fallback);

    plan_facts on = facts(memory_kind::device, p);
    on.gds = gds_mode::on;
    r = plan_route(on);
    EXPECT_EQ(r.chosen.counted_as, io_path::cufile_compat);
    EXPECT_EQ(r.reasons[0].code, reason_code::cufile_compat_forced);
}

TEST(planner, a_source_without_alternatives_is_staged_and_never_o_direct) {
    plan_facts f = facts(memory_kind::device, {});
    f.source_kind = "http";
    f.alternatives.clear();
    f.direct_io = direct_io_mode::on;
    plan_result r = plan_route(f);
    EXPECT_EQ(r.chosen.source, "http");
    EXPECT_EQ(r.chosen.counted_as, io_path::staged);
    EXPECT_EQ(r.reasons[0].code, reason_code::no_device_dma);
    f.gds = gds_mode::on;
    EXPECT_TRUE(plan_route(f).refusal);
}

// Large reads into device memory take the stream lanes; small ones, writes, managed memory,
// O_DIRECT reads and FERRY_GDS=on keep the workers' own staging buffers.
TEST(planner, large_reads_into_device_memory_take_the_stream_lanes) {
    auto with_lanes = [](plan_facts f) {
        f.lanes = 4;
        f.lane_buffer_size = 16 << 20;
        f.lane_threshold = 64 << 20;
        f.gds = gds_mode::off;
        return f;
    };
    plan_result big = plan_route(with_lanes(facts(memory_kind::device, {})));
    EXPECT_EQ(big.chosen.how, mover::lanes);
    EXPECT_EQ(big.chosen.counted_as, io_path::staged);
    EXPECT_EQ(codes(big), (std::vector<reason_code>{reason_code::gds_off, reason_code::staging, reason_code::stream_lanes}));
    EXPECT_EQ(big.reasons.back().text,
              "a read of 1 GiB (at least FERRY_LANE_THRESHOLD, 64 MiB) goes through 4 stream lanes of 2 x 16 MiB "
              "pinned buffers, filled by all 16 threads: fewer, larger copies to the GPU");

    plan_facts small = with_lanes(facts(memory_kind::device, {}));
    small.size = (64 << 20) - 1;
    EXPECT_EQ(plan_route(small).chosen.how, mover::staged);

    plan_facts write = with_lanes(facts(memory_kind::device, {}));
    write.dir = direction::write;
    EXPECT_EQ(plan_route(write).chosen.how, mover::staged);

    EXPECT_EQ(plan_route(with_lanes(facts(memory_kind::managed, {}))).chosen.how, mover::staged);

    plan_facts direct = with_lanes(facts(memory_kind::device, {}));
    direct.direct_io = direct_io_mode::on;
    EXPECT_EQ(plan_route(direct).chosen.how, mover::staged) << "the lanes read buffered";

    plan_facts off = with_lanes(facts(memory_kind::device, {}));
    off.lane_threshold = lanes_off;
    EXPECT_EQ(plan_route(off).chosen.how, mover::staged);

    plan_facts on = with_lanes(facts(memory_kind::device, {}));
    on.gds = gds_mode::on;
    without(on, alternative_role::device_dma);  // staged (and refused), never the lanes: cuFile only
    EXPECT_NE(plan_route(on).chosen.how, mover::lanes);

    // A file mostly out of the page cache: each worker streams its own part (staged); a cached
    // one, or one of unknown residency, takes the lanes.
    plan_facts cold = with_lanes(facts(memory_kind::device, {}));
    cold.cached_fraction = [] { return 0.1; };
    plan_result c = plan_route(cold);
    EXPECT_EQ(c.chosen.how, mover::staged);
    EXPECT_EQ(c.reasons.back().code, reason_code::residency) << c.reasons.back().text;
    plan_facts hot = with_lanes(facts(memory_kind::device, {}));
    hot.cached_fraction = [] { return 0.9; };
    EXPECT_EQ(plan_route(hot).chosen.how, mover::lanes);
    // Without lanes to choose (a gather asking only whether cuFile takes the file), the
    // residency probe is never asked.
    plan_facts no_lanes = facts(memory_kind::device, {});
    bool asked = false;
    no_lanes.cached_fraction = [&] {
        asked = true;
        return 0.1;
    };
    EXPECT_EQ(plan_route(no_lanes).chosen.how, mover::staged);
    EXPECT_FALSE(asked);

    // A remote source keeps its ranged GETs in flight on every thread: staged, and says why.
    plan_facts remote = with_lanes(facts(memory_kind::device, {}));
    remote.source_kind = "http";
    remote.remote = true;
    remote.alternatives.clear();
    plan_result r = plan_route(remote);
    EXPECT_EQ(r.chosen.how, mover::staged);
    EXPECT_NE(r.reasons.back().text.find("remote source"), std::string::npos) << r.reasons.back().text;
}

TEST(planner, a_server_without_ranges_is_a_fallback_the_plan_names) {
    for (memory_kind m : {memory_kind::host, memory_kind::device}) {
        plan_facts f;
        f.memory = m;
        f.size = 64 << 20;
        f.source_kind = "http";
        f.remote = true;
        f.ranged = false;
        plan_result r = plan_route(f);
        auto it = std::find_if(r.reasons.begin(), r.reasons.end(),
                               [](const reason& x) { return x.code == reason_code::no_ranges; });
        ASSERT_NE(it, r.reasons.end());
        EXPECT_TRUE(it->fallback);
        EXPECT_NE(it->text.find("no Range support"), std::string::npos) << it->text;
        EXPECT_EQ(to_string(reason_code::no_ranges), "no_ranges");
    }
}

TEST(planner, every_code_has_a_name) {
    for (int c = 0; c <= static_cast<int>(reason_code::route_forced); ++c)
        EXPECT_NE(to_string(static_cast<reason_code>(c)), "?");
}

}  // namespace
}  // namespace ferry::detail

namespace ferry::detail {
namespace {

// FERRY_IO_URING: `on` reads through the batched alternative, or refuses with its cause;
// `auto` and `off` never ask its probe (auto waits for a measurement that it is faster).
TEST(planner, io_uring_is_taken_only_when_asked_for_and_auto_says_why_not) {
    for (io_uring_mode mode : {io_uring_mode::auto_, io_uring_mode::off, io_uring_mode::on})
        for (bool usable : {true, false}) {
            SCOPED_TRACE(std::string(to_string(mode)) + (usable ? " usable" : " unusable"));
            int asked = 0;
            plan_facts f = facts(memory_kind::host, {});
            f.io_uring = mode;
            f.io_uring_queue_depth = 32;
            f.alternatives.push_back({alternative_for(alternative_role::batched_reads),
                                      [&asked, usable]() -> std::optional<unavailable_reason> {
                                          ++asked;
                                          if (usable) return std::nullopt;
                                          return unavailable_reason{.text = "io_uring_setup is not permitted (EPERM)",
                                                                    .cause = reason_code::io_uring_not_permitted};
                                      }});
            plan_result r = plan_route(f);
            if (mode == io_uring_mode::off) {
                EXPECT_EQ(asked, 0);
                EXPECT_EQ(r.chosen.source, "posix");
                EXPECT_FALSE(r.refusal);
                ASSERT_EQ(r.reasons.size(), 1u);
                continue;
            }
            if (mode == io_uring_mode::auto_) {
                // auto keeps the pool; where io_uring could serve, the plan says why not, last.
                EXPECT_EQ(asked, 1);
                EXPECT_EQ(r.chosen.source, "posix");
                EXPECT_FALSE(r.refusal);
                EXPECT_EQ(r.reasons[0].code, reason_code::host_memory);
                if (usable) {
                    ASSERT_EQ(r.reasons.size(), 2u);
                    EXPECT_EQ(r.reasons[1].code, reason_code::io_uring_not_faster);
                    EXPECT_NE(r.reasons[1].text.find("FERRY_IO_URING=on takes it"), std::string::npos);
                    EXPECT_FALSE(r.reasons[1].fallback);
                } else {
                    EXPECT_EQ(r.reasons.size(), 1u);
                }
                continue;
            }
            ASSERT_EQ(r.reasons.size(), 2u);
            EXPECT_EQ(r.reasons[1].code, reason_code::io_uring_on);
            if (usable) {
                EXPECT_EQ(r.chosen.source, "io_uring");
                EXPECT_EQ(r.chosen.counted_as, io_path::host);
                EXPECT_FALSE(r.refusal);
            } else {
                EXPECT_EQ(r.reasons[1].cause, reason_code::io_uring_not_permitted);
                ASSERT_TRUE(r.refusal);
                EXPECT_NE(r.refusal->text.find("EPERM"), std::string::npos);
            }
        }
}

}  // namespace
}  // namespace ferry::detail
