#include "index/passthrough_reason.h"

namespace pcrfs::index {

std::string PassthroughReasonName(PassthroughReason reason) {
  switch (reason) {
    case PassthroughReason::kNone:
      return "none";
    case PassthroughReason::kNotJpeg:
      return "not-jpeg";
    case PassthroughReason::kEmpty:
      return "empty";
    case PassthroughReason::kCorrupt:
      return "corrupt";
    case PassthroughReason::kTruncated:
      return "truncated";
    case PassthroughReason::kTooManyScans:
      return "too-many-scans";
    case PassthroughReason::kTooLarge:
      return "too-large";
    case PassthroughReason::kUnsupported:
      return "unsupported";
    case PassthroughReason::kTrailingData:
      return "trailing-data";
    case PassthroughReason::kUnreadable:
      return "unreadable";
    case PassthroughReason::kTooBig:
      return "too-big";
    case PassthroughReason::kIncomplete:
      return "incomplete";
  }
  return "unknown-" + std::to_string(static_cast<int>(reason));
}

}  // namespace pcrfs::index
