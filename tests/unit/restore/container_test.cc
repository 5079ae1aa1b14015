// The plan that makes a container's mounts again (restore/container.h): what it refuses before
// anything is created, and the namespaces it asks for.
#include "engine/restore/container.h"

#include <sched.h>
#include <sys/mount.h>
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

// Every step of `plan`, in words, in order.
std::vector<std::string> Steps(const ContainerPlan& plan) {
  std::vector<std::string> out;
  for (int i = 0;; ++i) {
    std::string step = plan.Describe(i);
    if (step == "an unknown step") return out;
    out.push_back(step);
  }
}

size_t IndexOf(const std::vector<std::string>& steps, const std::string& part) {
  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].find(part) != std::string::npos) return i;
  }
  return steps.size();
}

// A runtime's container in a user namespace: 0-65535 inside are 100000-165535 on the host.
image::Container InUserNamespace() {
  image::Container c = Basic();
  for (auto* map : {c.mutable_user_ns()->add_uid_map(), c.mutable_user_ns()->add_gid_map()}) {
    map->set_inside(0);
    map->set_outside(100000);
    map->set_count(65536);
  }
  c.mutable_mounts(1)->set_options("size=65536k,mode=755,uid=100000,gid=100000");
  c.mutable_mounts(1)->mutable_entries(0)->set_uid(100005);
  c.mutable_mounts(1)->mutable_entries(0)->set_gid(100005);
  image::Mount* null = c.add_mounts();
  null->set_kind(image::Mount::EXTERNAL);
  null->set_id(3);
  null->set_point("/dev/null");
  null->set_external("/dev/null");
  return c;
}

TEST(ContainerPlan, AUserNamespaceIsMadeWithTheOthersAndItsRootNamesOwnersInsideIt) {
  ContainerSetup setup = OverRoot();
  setup.external_mounts["/dev/null"] = "/dev/null";
  auto plan = ContainerPlan::Make(InUserNamespace(), setup);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->CloneFlags() & CLONE_NEWUSER);
  std::vector<std::string> steps = Steps(*plan);
  ASSERT_FALSE(steps.empty());
  EXPECT_THAT(steps[0], HasSubstr("wait for the id maps"));
  // Host paths are reached as the host's root, before the task becomes the namespace's.
  size_t root = IndexOf(steps, "bind the root file system"), host = IndexOf(steps, "open the host path /dev/null"),
         become = IndexOf(steps, "become uid 0, gid 0"), mount = IndexOf(steps, "mount tmpfs");
  ASSERT_LT(become, steps.size());
  ASSERT_LT(mount, steps.size());
  EXPECT_LT(root, host);
  EXPECT_LT(host, become);
  EXPECT_LT(become, mount);
  EXPECT_THAT(steps[mount], HasSubstr("uid=0,gid=0")) << "the tmpfs's owner as the namespace names it";
  EXPECT_EQ(plan->NetNsBeforeClone(), -1);
}

TEST(ContainerPlan, AnOwnerTheUserNamespaceDoesNotMapIsRefused) {
  image::Container c = InUserNamespace();
  c.mutable_mounts(1)->set_options("uid=0");  // the host's root
  ContainerSetup setup = OverRoot();
  setup.external_mounts["/dev/null"] = "/dev/null";
  auto plan = ContainerPlan::Make(c, setup);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(std::string(plan.status().message()), HasSubstr("uid=0"));
  c = InUserNamespace();
  c.mutable_mounts(1)->mutable_entries(0)->set_uid(7);
  plan = ContainerPlan::Make(c, setup);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(std::string(plan.status().message()), HasSubstr("pts"));
}

TEST(ContainerPlan, AHandedOverNetworkNamespaceIsJoinedBeforeTheUserNamespace) {
  image::Container c = InUserNamespace();
  c.set_own_net_ns(true);
  c.set_external_net("extRootNetNS");
  ContainerSetup setup = OverRoot();
  setup.external_mounts["/dev/null"] = "/dev/null";
  setup.net_ns_fd = 0;  // any descriptor: Make only keeps it
  auto plan = ContainerPlan::Make(c, setup);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->NetNsBeforeClone(), 0);
  EXPECT_FALSE(plan->CloneFlags() & CLONE_NEWNET);
  EXPECT_EQ(IndexOf(Steps(*plan), "enter the network namespace"), Steps(*plan).size())
      << "no setns from inside the user namespace, where it would be refused";
}

TEST(ContainerPlan, ACgroupNamespaceIsMadeAndItsHierarchiesMountedInsideIt) {
  image::Container c = Basic();
  c.set_own_cgroup_ns(true);
  image::Mount* pids = c.add_mounts();
  pids->set_kind(image::Mount::CGROUP);
  pids->set_id(3);
  pids->set_point("/sys/fs/cgroup/pids");
  pids->set_fs_root("/c1");
  pids->set_source("cgroup");
  pids->set_controllers("pids");
  pids->set_flags(MS_RDONLY);
  auto plan = ContainerPlan::Make(c, OverRoot());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->CloneFlags() & CLONE_NEWCGROUP);
  std::vector<std::string> steps = Steps(*plan);
  size_t mount = IndexOf(steps, "mount cgroup (cgroup, options 'pids') at /sys/fs/cgroup/pids");
  ASSERT_LT(mount + 1, steps.size()) << "a fresh mount, showing the namespace's root, not a bind of the host's";
  EXPECT_THAT(steps[mount + 1], HasSubstr("remount /sys/fs/cgroup/pids"));
}

TEST(ContainerPlan, APidNamespaceThatWasAnothersIsJoinedNotMade) {
  image::Container c = Basic();
  c.set_external_pid("extRootPidNS");
  ContainerSetup setup = OverRoot();
  auto plan = ContainerPlan::Make(c, setup);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(std::string(plan.status().message()), HasSubstr("inherit_fd extRootPidNS"));
  setup.pid_ns_fd = 0;  // any descriptor: Make only keeps it
  plan = ContainerPlan::Make(c, setup);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_FALSE(plan->CloneFlags() & CLONE_NEWPID);
  EXPECT_EQ(plan->PidNsBeforeClone(), 0);
  // With a user namespace of its own, its processes could not choose their ids there.
  *c.mutable_user_ns() = InUserNamespace().user_ns();
  plan = ContainerPlan::Make(c, setup);
  ASSERT_FALSE(plan.ok());
  EXPECT_TRUE(absl::IsUnimplemented(plan.status())) << plan.status();
}

TEST(CredsInside, NamesEveryIdAsTheNamespaceDoesAndRefusesOneItDoesNotMap) {
  image::UserNamespace ns = InUserNamespace().user_ns();
  image::Creds c;
  for (uint32_t id : {100000u, 101000u, 100000u, 100000u}) c.add_uids(id);
  for (uint32_t id : {100005u, 100005u, 100005u, 100005u}) c.add_gids(id);
  c.add_groups(100010);
  c.set_cap_eff(0x20000420);
  auto inside = CredsInside(c, ns);
  ASSERT_TRUE(inside.ok()) << inside.status();
  EXPECT_EQ(inside->uids(1), 1000u);
  EXPECT_EQ(inside->uids(0), 0u);
  EXPECT_EQ(inside->gids(3), 5u);
  EXPECT_EQ(inside->groups(0), 10u);
  EXPECT_EQ(inside->cap_eff(), 0x20000420u) << "capabilities are the namespace's already";
  c.set_groups(0, 0);
  auto unmapped = CredsInside(c, ns);
  ASSERT_FALSE(unmapped.ok());
  EXPECT_THAT(std::string(unmapped.status().message()), HasSubstr("supplementary group 0"));
}

TEST(ContainerPlan, ASecondNameNeedsItsFileSavedBefore) {
  image::Container c = Basic();
  image::TreeEntry* b = c.mutable_mounts(1)->add_entries();
  b->set_path("b");
  b->set_mode(S_IFREG | 0644);
  b->set_link_to("a");
  auto plan = ContainerPlan::Make(c, OverRoot());
  ASSERT_FALSE(plan.ok());
  EXPECT_TRUE(absl::IsDataLoss(plan.status())) << plan.status();
  image::TreeEntry a;
  a.set_path("a");
  a.set_mode(S_IFREG | 0644);
  a.set_mtime_ns(1234567890987654321);
  *c.mutable_mounts(1)->mutable_entries()->Add() = a;
  c.mutable_mounts(1)->mutable_entries()->SwapElements(1, 2);  // a, then b
  plan = ContainerPlan::Make(c, OverRoot());
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<std::string> steps = Steps(*plan);
  size_t link = IndexOf(steps, "link /dev/b to /dev/a"), times = IndexOf(steps, "give /dev/a its times back");
  ASSERT_LT(link, steps.size());
  ASSERT_LT(times, steps.size());
  EXPECT_LT(link, times) << "times are set once everything is made";
}

}  // namespace
}  // namespace cairn::restore
