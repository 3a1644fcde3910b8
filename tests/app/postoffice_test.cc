// The default Postoffice before Start: its queries read the settings once,
// through Options, as Start will.
#include "ps/internal/postoffice.h"

#include <gtest/gtest.h>
#include <stdlib.h>

namespace ps {
namespace {

TEST(PostofficeTest, SettingsAreReadOnceBeforeStart) {
  setenv("DMLC_PS_ROOT_URI", "127.0.0.1", 1);
  setenv("DMLC_PS_ROOT_PORT", "9", 1);
  setenv("DMLC_ROLE", "server", 1);
  setenv("DMLC_NUM_SERVER", "3", 1);
  setenv("DMLC_NUM_WORKER", "2", 1);
  setenv("PS_VERBOSE", "1", 1);
  Postoffice* po = Postoffice::Get();
  EXPECT_TRUE(po->is_server());
  EXPECT_FALSE(po->is_worker());
  EXPECT_EQ(po->num_servers(), 3);
  EXPECT_EQ(po->num_workers(), 2);
  EXPECT_EQ(po->verbose(), 1);
  EXPECT_EQ(po->GetServerKeyRanges().size(), 3u);
  // Read once: a later change of the environment is not seen.
  setenv("DMLC_ROLE", "worker", 1);
  setenv("DMLC_NUM_SERVER", "5", 1);
  EXPECT_TRUE(po->is_server());
  EXPECT_EQ(po->num_servers(), 3);
  EXPECT_EQ(po->GetServerKeyRanges().size(), 3u);
  EXPECT_EQ(po->node(), nullptr);  // Queries start nothing.
}

}  // namespace
}  // namespace ps
