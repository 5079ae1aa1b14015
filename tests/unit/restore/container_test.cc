// The plan that makes a container's mounts again (restore/container.h): what it refuses before
// anything is created, and the namespaces it asks for.
#include "engine/restore/container.h"

#include <sched.h>
#include <sys/stat.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cairn::restore {
namespace {

using ::testing::HasSubstr;

image::Container Basic() {
  image::Container c;
  image::Mount* root = c.add_mounts();
  root->set_kind(image::Mount::ROOT);
  root->set_id(1);
  root->set_point("/");
  root->set_fs_root("/");
  image::Mount* dev = c.add_mounts();
  dev->set_kind(image::Mount::FILESYSTEM);
  dev->set_id(2);
  dev->set_parent_id(1);
  dev->set_point("/dev");
  dev->set_fstype("tmpfs");
  dev->set_source("tmpfs");
  image::TreeEntry* pts = dev->add_entries();
  pts->set_path("pts");
  pts->set_mode(S_IFDIR | 0755);
  return c;
}

// A setup over this machine's root (Make only checks it is a directory).
ContainerSetup OverRoot() {
  ContainerSetup setup;
  setup.root = "/";
  return setup;
}

TEST(ContainerPlan, NeedsARootFileSystem) {
  auto plan = ContainerPlan::Make(Basic(), ContainerSetup{});
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(std::string(plan.status().message()), HasSubstr("--root"));
}

TEST(ContainerPlan, AsksForTheContainersNamespaces) {
  image::Container c = Basic();
  c.set_own_uts_ns(true);
  c.set_own_net_ns(true);
  ContainerSetup setup = OverRoot();
  auto plan = ContainerPlan::Make(c, setup);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->CloneFlags() & (CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWUTS | CLONE_NEWNET),
            static_cast<unsigned long>(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWUTS | CLONE_NEWNET));
}

TEST(ContainerPlan, AnExternalMountNeedsItsHostPath) {
  image::Container c = Basic();
  image::Mount* data = c.add_mounts();
  data->set_kind(image::Mount::EXTERNAL);
  data->set_id(3);
  data->set_point("/data");
  data->set_external("volume-data");
  ContainerSetup setup = OverRoot();
  auto plan = ContainerPlan::Make(c, setup);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(std::string(plan.status().message()), HasSubstr("volume-data"));
  setup.external_mounts["volume-data"] = "/tmp";
  EXPECT_TRUE(ContainerPlan::Make(c, setup).ok());
}

TEST(ContainerPlan, RefusesATmpfsFileThatWouldLeaveItsMount) {
  image::Container c = Basic();
  image::TreeEntry* bad = c.mutable_mounts(1)->add_entries();
  bad->set_path("../etc/passwd");
  bad->set_mode(S_IFREG | 0644);
  ContainerSetup setup = OverRoot();
  auto plan = ContainerPlan::Make(c, setup);
  ASSERT_FALSE(plan.ok());
  EXPECT_TRUE(absl::IsDataLoss(plan.status())) << plan.status();
}

TEST(ContainerPlan, RefusesABindOfAMountThatComesLater) {
  image::Container c = Basic();
  image::Mount* keys = c.add_mounts();
  keys->set_kind(image::Mount::BIND);
  keys->set_id(4);
  keys->set_point("/proc/keys");
  keys->set_fs_root("/null");
  keys->set_bind_of(9);
  ContainerSetup setup = OverRoot();
  auto plan = ContainerPlan::Make(c, setup);
  ASSERT_FALSE(plan.ok());
  EXPECT_TRUE(absl::IsDataLoss(plan.status())) << plan.status();
}

}  // namespace
}  // namespace cairn::restore
