#include "codec/scan_script.h"

#include <gtest/gtest.h>

#include <vector>

namespace pcrfs::codec {
namespace {

struct Expected {
  int group;
  std::vector<int> components;
  int ss, se, ah, al;
};

void ExpectScript(const ScanScript& script, const std::vector<Expected>& expected) {
  ASSERT_EQ(script.num_scans, static_cast<int>(expected.size()));
  for (int i = 0; i < script.num_scans; i++) {
    SCOPED_TRACE(i);
    const jpeg_scan_info& s = script.scans[i];
    EXPECT_EQ(script.group[i], expected[i].group);
    ASSERT_EQ(s.comps_in_scan, static_cast<int>(expected[i].components.size()));
    for (int c = 0; c < s.comps_in_scan; c++) {
      EXPECT_EQ(s.component_index[c], expected[i].components[c]);
    }
    EXPECT_EQ(s.Ss, expected[i].ss);
    EXPECT_EQ(s.Se, expected[i].se);
    EXPECT_EQ(s.Ah, expected[i].ah);
    EXPECT_EQ(s.Al, expected[i].al);
  }
}

// Checks the rules libjpeg's validate_script enforces (jcmaster.c) and that the script leaves
// every bit of every coefficient of every component coded, with groups 1..10 non-decreasing.
void ExpectCompleteAndValid(const ScanScript& script, int num_components,
                            const ComponentSampling* sampling) {
  // Al of the last scan that coded each coefficient, or -1 if never coded.
  std::vector<std::vector<int>> last_al(num_components, std::vector<int>(64, -1));
  int previous_group = 1;
  for (int i = 0; i < script.num_scans; i++) {
    SCOPED_TRACE(i);
    const jpeg_scan_info& s = script.scans[i];
    int group = script.group[i];
    EXPECT_GE(group, previous_group);
    EXPECT_LE(group, 10);
    previous_group = group;
    ASSERT_GE(s.comps_in_scan, 1);
    ASSERT_LE(s.comps_in_scan, MAX_COMPS_IN_SCAN);
    if (s.comps_in_scan > 1) {
      EXPECT_EQ(s.Ss, 0) << "only DC scans may interleave";
      int blocks = 0;
      for (int c = 0; c < s.comps_in_scan; c++) {
        blocks += sampling[s.component_index[c]].h * sampling[s.component_index[c]].v;
      }
      EXPECT_LE(blocks, C_MAX_BLOCKS_IN_MCU);
    }
    EXPECT_TRUE((s.Ss == 0 && s.Se == 0) || (s.Ss >= 1 && s.Se >= s.Ss && s.Se <= 63));
    for (int c = 0; c < s.comps_in_scan; c++) {
      int ci = s.component_index[c];
      ASSERT_GE(ci, 0);
      ASSERT_LT(ci, num_components);
      if (c > 0) {
        EXPECT_GT(ci, s.component_index[c - 1]);
      }
      if (s.Ss > 0) {
        EXPECT_GE(last_al[ci][0], 0) << "AC before DC";
      }
      for (int k = s.Ss; k <= s.Se; k++) {
        if (s.Ah == 0) {
          EXPECT_EQ(last_al[ci][k], -1) << "coefficient " << k << " coded twice";
        } else {
          EXPECT_EQ(last_al[ci][k], s.Ah) << "refinement of coefficient " << k;
          EXPECT_EQ(s.Al, s.Ah - 1);
        }
        last_al[ci][k] = s.Al;
      }
    }
  }
  for (int ci = 0; ci < num_components; ci++) {
    for (int k = 0; k < 64; k++) {
      EXPECT_EQ(last_al[ci][k], 0) << "component " << ci << " coefficient " << k;
    }
  }
}

TEST(ScanScriptTest, YCbCrIsLibjpegStandardProgression) {
  ComponentSampling sampling[3] = {{2, 2}, {1, 1}, {1, 1}};
  ScanScript script;
  ASSERT_TRUE(BuildScanScript(JCS_YCbCr, 3, sampling, &script));
  ExpectScript(script, {
                           {1, {0, 1, 2}, 0, 0, 0, 1},
                           {2, {0}, 1, 5, 0, 2},
                           {3, {2}, 1, 63, 0, 1},
                           {4, {1}, 1, 63, 0, 1},
                           {5, {0}, 6, 63, 0, 2},
                           {6, {0}, 1, 63, 2, 1},
                           {7, {0, 1, 2}, 0, 0, 1, 0},
                           {8, {2}, 1, 63, 1, 0},
                           {9, {1}, 1, 63, 1, 0},
                           {10, {0}, 1, 63, 1, 0},
                       });
  ExpectCompleteAndValid(script, 3, sampling);
}

TEST(ScanScriptTest, GrayKeepsLumaGroupPositions) {
  ComponentSampling sampling[1] = {{1, 1}};
  ScanScript script;
  ASSERT_TRUE(BuildScanScript(JCS_GRAYSCALE, 1, sampling, &script));
  ExpectScript(script, {
                           {1, {0}, 0, 0, 0, 1},
                           {2, {0}, 1, 5, 0, 2},
                           {5, {0}, 6, 63, 0, 2},
                           {6, {0}, 1, 63, 2, 1},
                           {7, {0}, 0, 0, 1, 0},
                           {10, {0}, 1, 63, 1, 0},
                       });
  ExpectCompleteAndValid(script, 1, sampling);
}

TEST(ScanScriptTest, RgbComponentsAllFollowTheLumaSchedule) {
  ComponentSampling sampling[3] = {{1, 1}, {1, 1}, {1, 1}};
  ScanScript script;
  ASSERT_TRUE(BuildScanScript(JCS_RGB, 3, sampling, &script));
  ASSERT_EQ(script.num_scans, 2 + 4 * 3);
  ExpectCompleteAndValid(script, 3, sampling);
  EXPECT_EQ(script.group[1], 2);
  EXPECT_EQ(script.group[3], 2);
  EXPECT_EQ(script.group[4], 5);
  EXPECT_EQ(script.group[13], 10);
  EXPECT_EQ(script.scans[13].component_index[0], 2);
  for (int i = 0; i < script.num_scans; i++) {
    for (int g : {3, 4, 8, 9}) EXPECT_NE(script.group[i], g);
  }
}

TEST(ScanScriptTest, CmykIsCompleteAtGroupTen) {
  ComponentSampling sampling[4] = {{1, 1}, {1, 1}, {1, 1}, {1, 1}};
  ScanScript script;
  ASSERT_TRUE(BuildScanScript(JCS_CMYK, 4, sampling, &script));
  ASSERT_EQ(script.num_scans, 2 + 4 * 4);
  EXPECT_EQ(script.scans[0].comps_in_scan, 4);
  EXPECT_EQ(script.group[script.num_scans - 1], 10);
  ExpectCompleteAndValid(script, 4, sampling);
}

TEST(ScanScriptTest, YcckChromaIsCbAndCr) {
  ComponentSampling sampling[4] = {{2, 2}, {1, 1}, {1, 1}, {2, 2}};
  ScanScript script;
  ASSERT_TRUE(BuildScanScript(JCS_YCCK, 4, sampling, &script));
  ExpectCompleteAndValid(script, 4, sampling);
  EXPECT_FALSE(IsChromaComponent(JCS_YCCK, 4, 0));
  EXPECT_TRUE(IsChromaComponent(JCS_YCCK, 4, 1));
  EXPECT_TRUE(IsChromaComponent(JCS_YCCK, 4, 2));
  EXPECT_FALSE(IsChromaComponent(JCS_YCCK, 4, 3));
  for (int i = 0; i < script.num_scans; i++) {
    int ci = script.scans[i].component_index[0];
    if (script.scans[i].Ss == 0) continue;
    switch (script.group[i]) {
      case 3:
      case 8:
        EXPECT_EQ(ci, 2);
        break;
      case 4:
      case 9:
        EXPECT_EQ(ci, 1);
        break;
      default:
        EXPECT_TRUE(ci == 0 || ci == 3) << ci;
    }
  }
  // 4 + 1 + 1 + 4 blocks fit one interleaved DC scan.
  EXPECT_EQ(script.scans[0].comps_in_scan, 4);
}

TEST(ScanScriptTest, DcScansSplitAtTenBlocksPerMcu) {
  ComponentSampling sampling[3] = {{4, 4}, {1, 1}, {1, 1}};
  ScanScript script;
  ASSERT_TRUE(BuildScanScript(JCS_YCbCr, 3, sampling, &script));
  ExpectCompleteAndValid(script, 3, sampling);
  EXPECT_EQ(script.scans[0].comps_in_scan, 1);
  EXPECT_EQ(script.scans[1].comps_in_scan, 2);
  EXPECT_EQ(script.group[0], 1);
  EXPECT_EQ(script.group[1], 1);
}

TEST(ScanScriptTest, DcScansSplitAtFourComponents) {
  ComponentSampling sampling[MAX_COMPONENTS];
  ScanScript script;
  ASSERT_TRUE(BuildScanScript(JCS_UNKNOWN, MAX_COMPONENTS, sampling, &script));
  ExpectCompleteAndValid(script, MAX_COMPONENTS, sampling);
  // 10 components: DC scans of 4 + 4 + 2 in each of groups 1 and 7, and 4 AC scans each.
  EXPECT_EQ(script.num_scans, 6 + 4 * MAX_COMPONENTS);
  EXPECT_EQ(script.scans[2].comps_in_scan, 2);
}

TEST(ScanScriptTest, UnknownTwoComponentsAreLumaLike) {
  ComponentSampling sampling[2] = {{2, 1}, {1, 1}};
  ScanScript script;
  ASSERT_TRUE(BuildScanScript(JCS_UNKNOWN, 2, sampling, &script));
  ExpectCompleteAndValid(script, 2, sampling);
  EXPECT_EQ(script.num_scans, 2 + 4 * 2);
}

TEST(ScanScriptTest, RejectsBadInput) {
  ComponentSampling sampling[MAX_COMPONENTS + 1];
  ScanScript script;
  EXPECT_FALSE(BuildScanScript(JCS_UNKNOWN, 0, sampling, &script));
  EXPECT_FALSE(BuildScanScript(JCS_UNKNOWN, MAX_COMPONENTS + 1, sampling, &script));
  EXPECT_EQ(script.num_scans, 0);
  sampling[0].h = 5;
  EXPECT_FALSE(BuildScanScript(JCS_GRAYSCALE, 1, sampling, &script));
}

}  // namespace
}  // namespace pcrfs::codec
