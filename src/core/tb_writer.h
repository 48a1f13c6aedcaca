// TensorBoard event-file writer for scalars, with the Event/Summary protobufs hand-encoded (no protobuf dependency,
// and no clash with the google/ headers shipped inside torch/include). Format: tensorboard's record_writer.py and
// event_file_writer.py. Scalars, PNG images (summary.proto Summary.Image), the run's hyper-parameters for the HParams
// dashboard (tensorboard/plugins/hparams: plugin_data.proto, api.proto) and the restart (purge) marker; no histograms,
// audio or text.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/png.h"

namespace vdt {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, init and final xor 0xFFFFFFFF); not zlib's CRC-32.
uint32_t crc32c(const void* data, size_t n);
// The TFRecord mask: ((c >> 15) | (c << 17)) + 0xa282ead8, mod 2^32.
uint32_t masked_crc32c(const void* data, size_t n);

// Writes one events.out.tfevents.<unix time, 10 digits>.<hostname>.<pid>.<n> file under a directory. Records are
// buffered; flush() pushes them to disk (the trainer calls it at its log interval), the destructor flushes too.
class TbWriter {
 public:
  // Creates `dir` if needed and writes the header record Event{wall_time, file_version="brain.Event:2"}.
  explicit TbWriter(const std::string& dir);
  ~TbWriter();
  TbWriter(const TbWriter&) = delete;
  TbWriter& operator=(const TbWriter&) = delete;

  // Event{wall_time, step, summary{value{tag, simple_value}}}; the value is stored as float32 (simple_value).
  void add_scalar(const std::string& tag, double value, int64_t step);
  // Event{wall_time, step, summary{value{tag, image{height, width, colorspace 3 (RGB), encoded_image_string}}}}: the
  // IMAGES dashboard shows it under `tag` at `step`.
  void add_image(const std::string& tag, const Png& png, int64_t step);
  // The HParams dashboard's record of this run, as torch.utils.tensorboard's add_hparams writes it: two events
  // (step 0), the summaries "_hparams_/experiment" (an Experiment listing each hyper-parameter with its type and the
  // `metric_tags`, scalar tags of this run the dashboard tabulates) and "_hparams_/session_start_info" (the values),
  // each a Summary.Value whose metadata carries plugin "hparams" and an HParamsPluginData (version 0). `hparams`: a
  // flat JSON object; numbers, strings and booleans keep their type, anything else (null, arrays, objects) is stored
  // as its JSON text.
  void add_hparams(const nlohmann::ordered_json& hparams, const std::vector<std::string>& metric_tags);
  // TensorBoard's purge marker, as PyTorch's SummaryWriter(purge_step=step) writes it: Event{step, file_version} then
  // Event{step, session_log{status: START}}. A reader (EventAccumulator, purge_orphaned_data) drops every event with
  // step >= `step` written before it, so a run resumed after a crash does not show the replayed steps twice.
  void purge_from(int64_t step);
  // fflush + fsync.
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& data);

  std::string path_;
  FILE* file_ = nullptr;
};

}  // namespace vdt
