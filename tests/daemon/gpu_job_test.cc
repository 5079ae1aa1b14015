// GPU jobs on cairnd (JobSpec.gpus, docs/gpu.md): the node's GPUs come from a fake NVML (two
// "H100"s), the job's CUDA state from the fake driver of tests/gpu (fake_cuda_app). A job gets free
// GPUs and sees them in CUDA_VISIBLE_DEVICES; a job asking for more than are free is refused
// naming who holds them; a GPU job's checkpoint restores onto its GPUs, or other free ones of the
// same model, and the program finishes with the checksum of an uninterrupted run.
#include <chrono>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "daemon_harness.h"

namespace cairn::testing {
namespace {

using namespace std::chrono_literals;

// The environment of process `pid` (NUL-separated entries).
std::vector<std::string> EnvironOf(pid_t pid) {
  std::string raw = ReadFile("/proc/" + std::to_string(pid) + "/environ");
  std::vector<std::string> out;
  for (size_t at = 0; at < raw.size();) {
    size_t end = raw.find('\0', at);
    if (end == std::string::npos) end = raw.size();
    out.push_back(raw.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

// The CUDA_VISIBLE_DEVICES of the first descendant of `pid` that runs `exe` ("" if none yet).
std::string VisibleDevicesOfProgram(pid_t pid, const std::string& exe) {
  std::vector<pid_t> todo = {pid};
  for (size_t i = 0; i < todo.size() && i < 64; ++i) {
    std::error_code ec;
    std::string base = "/proc/" + std::to_string(todo[i]);
    if (std::filesystem::read_symlink(base + "/exe", ec).string() == exe) {
      for (const std::string& e : EnvironOf(todo[i])) {
        if (e.rfind("CUDA_VISIBLE_DEVICES=", 0) == 0) return e.substr(21);
      }
      return "(unset)";
    }
    for (const auto& t : std::filesystem::directory_iterator(base + "/task", ec)) {
      std::string kids = ReadFile(t.path().string() + "/children");
      for (size_t at = 0; at < kids.size();) {
        size_t end = kids.find(' ', at);
        if (end == std::string::npos) end = kids.size();
        if (end > at) todo.push_back(std::atoi(kids.substr(at, end - at).c_str()));
        at = end + 1;
      }
    }
  }
  return "";
}

TEST(DaemonGpu, JobsGetFreeGpusAndACheckpointRestoresOntoFreeGpus) {
  TempDir dir;
  BecomeSubreaper();
  std::string work = dir / "work", plain = dir / "plain";
  std::filesystem::create_directories(work);
  std::filesystem::create_directories(plain);
  CommandResult uninterrupted = RunCommand({FAKE_CUDA_APP, plain, "150", "0"}, plain);
  ASSERT_TRUE(uninterrupted.Exited(0)) << uninterrupted.Describe();

  std::string xid_file = dir / "xid";
  DaemonProcess d(dir.path(), "gpu", {"--nvml-library", std::string(FAKE_DRIVER_DIR) + "/libnvidia-ml.so.1"},
                  {std::string("LD_LIBRARY_PATH=") + FAKE_DRIVER_DIR, "CAIRN_FAKE_NVML_GPUS=2",
                   "CAIRN_FAKE_NVML_EVENT_FILE=" + xid_file});
  ASSERT_TRUE(d.Start());
  CommandResult info = d.Cairn({"node", "info"});
  ASSERT_TRUE(info.Exited(0)) << info.Describe();
  EXPECT_NE(info.out.find("gpus: 2 H100"), std::string::npos) << info.Describe();

  // The fake's device files the job's program made (one per GPU it was on), removed at the end.
  std::set<std::string> devices;
  auto remember_device = [&] {
    std::string device = ReadFile(work + "/device");
    if (device.rfind("/dev/nvidia-cairn-fake-", 0) == 0) devices.insert(device.substr(0, device.find('\n')));
  };
  CommandResult a = d.Cairn({"job", "run", "--name", "a", "--gpus", "1", "--", FAKE_CUDA_APP, work, "150", "20"});
  ASSERT_TRUE(a.Exited(0)) << a.Describe();
  nlohmann::json ja = d.Json({"job", "show", "a"});
  ASSERT_FALSE(ja.is_null());
  ASSERT_EQ(ja["job"]["gpu_devices"], nlohmann::json::array({0})) << ja.dump();
  pid_t init_a = ja["job"]["host_pid"].get<int>();
  std::string visible;
  for (auto until = std::chrono::steady_clock::now() + 10s;
       (visible = VisibleDevicesOfProgram(init_a, FAKE_CUDA_APP)).empty() && std::chrono::steady_clock::now() < until;) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(visible, "0") << "the job's program does not see its GPU";

  CommandResult b = d.Cairn({"job", "run", "--name", "b", "--gpus", "2", "--", "/bin/sleep", "1000"});
  EXPECT_TRUE(b.FailedCleanly()) << b.Describe();
  EXPECT_NE(b.err.find("asks for 2 GPUs"), std::string::npos) << b.Describe();
  EXPECT_NE(b.err.find("1 free (held: GPU 0 by job a)"), std::string::npos) << b.Describe();

  CommandResult c = d.Cairn({"job", "run", "--name", "c", "--gpus", "1", "--", "/bin/sleep", "1000"});
  ASSERT_TRUE(c.Exited(0)) << c.Describe();
  EXPECT_EQ(d.Json({"job", "show", "c"})["job"]["gpu_devices"], nlohmann::json::array({1}));

  for (auto until = std::chrono::steady_clock::now() + 20s;
       std::atoi(ReadFile(work + "/progress").c_str()) < 20 && std::chrono::steady_clock::now() < until;) {
    std::this_thread::sleep_for(20ms);
  }
  // An Xid error on GPU 0: its job (a, not c) is checkpointed at once, pinned, and runs on.
  WriteFile(xid_file, "0 79\n");
  nlohmann::json xid_cps;
  for (auto until = std::chrono::steady_clock::now() + 30s; std::chrono::steady_clock::now() < until;) {
    xid_cps = d.Json({"checkpoint", "list", "--job", "a"});
    if (!xid_cps.is_null() && xid_cps["checkpoints"].size() == 1 && xid_cps["checkpoints"][0]["state"] == "complete") break;
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_EQ(xid_cps["checkpoints"].size(), 1u) << "no checkpoint of job a after an Xid on its GPU: " << xid_cps.dump()
                                                << "\n" << d.RunLog();
  EXPECT_EQ(xid_cps["checkpoints"][0]["reason"], "gpu-xid");
  EXPECT_EQ(xid_cps["checkpoints"][0]["pinned"], true);
  EXPECT_EQ(xid_cps["checkpoints"][0]["gpu_processes"], 1);
  EXPECT_TRUE(d.Json({"checkpoint", "list", "--job", "c"})["checkpoints"].empty()) << "job c is on GPU 1";
  EXPECT_EQ(d.Json({"job", "show", "a"})["job"]["state"], "running");

  // Its device state saved with it: the program stops there.
  CommandResult ck = d.Cairn({"job", "checkpoint", "a", "--kill"});
  ASSERT_TRUE(ck.Exited(0)) << ck.Describe() << "\n" << d.RunLog();
  ASSERT_TRUE(WaitGone(init_a, 20s).gone);
  nlohmann::json cps = d.Json({"checkpoint", "list", "--job", "a"});
  ASSERT_FALSE(cps.is_null());
  EXPECT_EQ(cps["checkpoints"][1]["gpu_processes"], 1) << "the checkpoint did not go through the driver: " << cps.dump();

  // GPU 0 is free again, and another job takes it: with GPU 1 held too, job a has nowhere to go.
  CommandResult b2 = d.Cairn({"job", "run", "--name", "b2", "--gpus", "1", "--", "/bin/sleep", "1000"});
  ASSERT_TRUE(b2.Exited(0)) << b2.Describe();
  CommandResult refused = d.Cairn({"job", "restore", "a"});
  EXPECT_TRUE(refused.FailedCleanly()) << refused.Describe();
  EXPECT_NE(refused.err.find("its checkpoint was taken on GPU 0, held or missing here"), std::string::npos)
      << refused.Describe();
  EXPECT_NE(refused.err.find("0 free (held: GPU 0 by job b2, GPU 1 by job c)"), std::string::npos) << refused.Describe();
  EXPECT_EQ(d.Json({"job", "show", "a"})["job"]["gpu_devices"], nlohmann::json::array({0})) << "a refused restore moved it";

  // GPU 1 frees: job a comes back there, its device state moved from GPU 0 by the driver.
  ASSERT_TRUE(d.Cairn({"job", "kill", "c"}).Exited(0));
  CommandResult restored = d.Cairn({"job", "restore", "a"});
  ASSERT_TRUE(restored.Exited(0)) << restored.Describe() << "\n" << d.RunLog();
  EXPECT_EQ(d.Json({"job", "show", "a"})["job"]["gpu_devices"], nlohmann::json::array({1}));
  for (auto until = std::chrono::steady_clock::now() + 10s;
       ReadFile(work + "/gpu") != "1\n" && std::chrono::steady_clock::now() < until;) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(ReadFile(work + "/gpu"), "1\n") << "the job's device state is not on GPU 1";
  remember_device();
  EXPECT_EQ(d.Json({"checkpoint", "list", "--job", "a"})["checkpoints"][1]["gpu_devices"], nlohmann::json::array({0}));

  // A newer checkpoint, taken on GPU 1; then GPU 0 frees and the older one (taken there) is
  // restored: the job goes back to GPU 0 with it, and its record says so (not its latest run's).
  const std::string older = cps["checkpoints"][1]["id"];
  pid_t init_a2 = d.Json({"job", "show", "a"})["job"]["host_pid"].get<int>();
  CommandResult newer = d.Cairn({"job", "checkpoint", "a", "--kill"});
  ASSERT_TRUE(newer.Exited(0)) << newer.Describe() << "\n" << d.RunLog();
  ASSERT_TRUE(WaitGone(init_a2, 20s).gone);
  EXPECT_EQ(d.Json({"checkpoint", "list", "--job", "a"})["checkpoints"][2]["gpu_devices"], nlohmann::json::array({1}));
  ASSERT_TRUE(d.Cairn({"job", "kill", "b2"}).Exited(0));
  CommandResult back = d.Cairn({"job", "restore", "a", "--checkpoint", older});
  ASSERT_TRUE(back.Exited(0)) << back.Describe() << "\n" << d.RunLog();
  EXPECT_EQ(d.Json({"job", "show", "a"})["job"]["gpu_devices"], nlohmann::json::array({0}))
      << "the job's record names another GPU than the one its device state went back to";
  for (auto until = std::chrono::steady_clock::now() + 10s;
       ReadFile(work + "/gpu") != "0\n" && std::chrono::steady_clock::now() < until;) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(ReadFile(work + "/gpu"), "0\n") << "the older checkpoint's device state is not on GPU 0";
  for (auto until = std::chrono::steady_clock::now() + 60s;
       d.Json({"job", "show", "a"})["job"]["state"] == "running" && std::chrono::steady_clock::now() < until;) {
    std::this_thread::sleep_for(100ms);
  }
  CommandResult logs = d.Cairn({"job", "logs", "a"});
  EXPECT_EQ(logs.out, uninterrupted.out) << "the restored GPU job computed something else\n" << logs.Describe();
  d.KillJobs();
  remember_device();
  for (const std::string& device : devices) std::filesystem::remove(device);
}

// A GPU event's checkpoint runs beside the watcher, not on its thread: while the checkpoint of
// GPU 0's job is held inside its memory copy (the test hook, 3 s), an Xid on GPU 1 is taken at
// once and its job checkpointed too.
TEST(DaemonGpu, AGpuEventsCheckpointDoesNotHoldTheNextEvent) {
  TempDir dir;
  BecomeSubreaper();
  std::string xid_file = dir / "xid";
  DaemonProcess d(dir.path(), "gpu", {"--nvml-library", std::string(FAKE_DRIVER_DIR) + "/libnvidia-ml.so.1"},
                  {std::string("LD_LIBRARY_PATH=") + FAKE_DRIVER_DIR, "CAIRN_FAKE_NVML_GPUS=2",
                   "CAIRN_FAKE_NVML_EVENT_FILE=" + xid_file, "CAIRND_TEST_PAUSE_IN_CHECKPOINT=3"});
  ASSERT_TRUE(d.Start());
  for (const char* name : {"a", "b"}) {
    CommandResult r = d.Cairn({"job", "run", "--name", name, "--gpus", "1", "--", "/bin/sleep", "1000"});
    ASSERT_TRUE(r.Exited(0)) << r.Describe();
  }
  EXPECT_EQ(d.Json({"job", "show", "b"})["job"]["gpu_devices"], nlohmann::json::array({1}));
  auto consumed = [&](std::chrono::milliseconds within) {
    for (auto until = std::chrono::steady_clock::now() + within; std::chrono::steady_clock::now() < until;) {
      if (!std::filesystem::exists(xid_file)) return true;
      std::this_thread::sleep_for(10ms);
    }
    return !std::filesystem::exists(xid_file);
  };
  auto writing = [&](const std::string& job) {
    nlohmann::json l = d.Json({"checkpoint", "list", "--job", job});
    return !l.is_null() && l["checkpoints"].size() == 1 && l["checkpoints"][0]["state"] == "writing";
  };
  WriteFile(xid_file, "0 79\n");
  ASSERT_TRUE(consumed(10s));
  for (auto until = std::chrono::steady_clock::now() + 10s; !writing("a") && std::chrono::steady_clock::now() < until;) {
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(writing("a")) << d.RunLog();
  WriteFile(xid_file, "1 79\n");
  EXPECT_TRUE(consumed(1500ms)) << "the watcher did not take GPU 1's event while GPU 0's checkpoint ran";
  EXPECT_TRUE(writing("a")) << "the first checkpoint ended before the second event was taken: the test proves nothing";
  for (const char* job : {"a", "b"}) {
    nlohmann::json l;
    for (auto until = std::chrono::steady_clock::now() + 30s; std::chrono::steady_clock::now() < until;) {
      l = d.Json({"checkpoint", "list", "--job", job});
      if (!l.is_null() && l["checkpoints"].size() == 1 && l["checkpoints"][0]["state"] == "complete") break;
      std::this_thread::sleep_for(100ms);
    }
    ASSERT_EQ(l["checkpoints"].size(), 1u) << job << ": " << l.dump();
    EXPECT_EQ(l["checkpoints"][0]["state"], "complete") << job << ": " << l.dump();
    EXPECT_EQ(l["checkpoints"][0]["reason"], "gpu-xid");
  }
  d.KillJobs();
}

}  // namespace
}  // namespace cairn::testing
