// State slots: alternation, the link, and every way a slot can be unusable (missing manifest, truncated or flipped
// file, a writer that never committed) — each detected, with the other slot used instead.
#include <filesystem>
#include <fstream>

#include "core/state_slots.h"
#include "test_util.h"

namespace vdt {
namespace {

namespace fs = std::filesystem;

std::string write_slot(const std::string& run, int64_t step, const std::string& keep = "") {
  SlotWriter w(run, keep);
  std::ofstream(w.path("payload.bin"), std::ios::binary) << std::string(4096, static_cast<char>('a' + step % 26));
  w.write_text("info.json", "{\"step\": " + std::to_string(step) + "}\n");
  w.commit({{"step", step}});
  return w.dir();
}

std::string link_of(const std::string& run) { return fs::read_symlink(fs::path(run) / "state").string(); }

TEST(StateSlots, AlternateAndTheLinkFollowsTheNewest) {
  test::TempDir d;
  const auto run = d.path().string();
  EXPECT_FALSE(find_slot(run, nullptr).has_value());
  EXPECT_EQ(fs::path(write_slot(run, 1)).filename(), "state_A");
  EXPECT_EQ(link_of(run), "state_A");
  EXPECT_EQ(fs::path(write_slot(run, 2)).filename(), "state_B");
  EXPECT_EQ(link_of(run), "state_B");
  EXPECT_EQ(fs::path(write_slot(run, 3)).filename(), "state_A");
  const auto s = find_slot(run, nullptr);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->info["step"], 3);
  EXPECT_EQ(check_slot(run + "/state_B"), "");
  // Named slots and the link resolve to themselves.
  EXPECT_EQ(find_slot(run + "/state_B", nullptr)->info["step"], 2);
  EXPECT_EQ(find_slot(run + "/state", nullptr)->info["step"], 3);
  EXPECT_EQ(run_dir_of(run + "/state_A"), fs::path(run).lexically_normal().string());
}

TEST(StateSlots, NeverOverwritesTheSlotToKeep) {
  test::TempDir d;
  const auto run = d.path().string();
  write_slot(run, 1);                                     // A
  write_slot(run, 2);                                     // B, link -> B
  const auto dir = write_slot(run, 3, run + "/state_A");  // keep A (e.g. resumed from it): writes B again
  EXPECT_EQ(fs::path(dir).filename(), "state_B");
  EXPECT_EQ(find_slot(run + "/state_A", nullptr)->info["step"], 1);
}

TEST(StateSlots, CorruptOrPartialSlotsFallBackToTheOther) {
  test::TempDir d;
  const auto run = d.path().string();
  write_slot(run, 1);
  write_slot(run, 2);  // state_B, newest
  {                    // flipped byte
    std::fstream f(run + "/state_B/payload.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('#');
  }
  std::vector<std::string> notes;
  auto s = find_slot(run, &notes);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->info["step"], 1);
  ASSERT_GE(notes.size(), 1u);
  EXPECT_NE(notes[0].find("payload.bin"), std::string::npos) << notes[0];
  EXPECT_NE(notes[0].find("corrupt"), std::string::npos) << notes[0];
  // The link names B; asking for it explicitly still falls back, saying so.
  notes.clear();
  EXPECT_EQ(find_slot(run + "/state", &notes)->info["step"], 1);
  EXPECT_FALSE(notes.empty());

  write_slot(run, 3, run + "/state_A");                // rewrites B (keeping A)
  fs::resize_file(run + "/state_B/payload.bin", 100);  // truncated
  EXPECT_NE(check_slot(run + "/state_B").find("truncated"), std::string::npos) << check_slot(run + "/state_B");
  EXPECT_EQ(find_slot(run, nullptr)->info["step"], 1);

  fs::remove(run + "/state_A/slot.json");  // partial: never completed
  EXPECT_NE(check_slot(run + "/state_A").find("never completed"), std::string::npos);
  notes.clear();
  EXPECT_FALSE(find_slot(run, &notes).has_value());
  EXPECT_EQ(notes.size(), 2u);
}

TEST(StateSlots, AnUncommittedWriterLeavesNothingAndTheLinkUnmoved) {
  test::TempDir d;
  const auto run = d.path().string();
  write_slot(run, 1);
  try {
    SlotWriter w(run);
    std::ofstream(w.path("payload.bin")) << "half";
    throw std::runtime_error("disk full");  // the save fails before commit()
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(link_of(run), "state_A");
  EXPECT_TRUE(fs::is_empty(run + "/state_B"));
  EXPECT_EQ(find_slot(run, nullptr)->info["step"], 1);
}

TEST(StateSlots, AStateThatIsNotALinkIsRefused) {
  test::TempDir d;
  fs::create_directories(d.path() / "state");
  test::expect_error([&] { SlotWriter w(d.path().string()); }, {"state", "not a link"});
}

}  // namespace
}  // namespace vdt
