// `frugal smi`: nvidia-smi's view of the GPUs and their processes (through NVML) joined with what
// only frugal knows of its own processes: allocated and reserved bytes and their peaks, as each
// frugal process publishes them (Note [Published stats]).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <thread>

#include "memory/nvml.h"
#include "memory/published_stats.h"
#include "memory/smi_report.h"
#include "tools/commands.h"
#include "tools/options.h"

namespace frugal::tools {

namespace {

constexpr const char* kHelp =
    "usage: frugal smi [-l SECONDS] [--count K]\n"
    "  The GPUs (memory total/used/free, utilisation) and the processes holding their memory,\n"
    "  as NVML reports them, and for frugal processes also their allocated and reserved bytes\n"
    "  and peaks, which nvidia-smi cannot see (a frugal process publishes them at step ends to\n"
    "  $FRUGAL_STATS_DIR, by default /tmp/frugal-<uid>). Without NVML or a GPU it says so in\n"
    "  one line and still lists the frugal processes (CPU runs, for one).\n"
    "  -l, --loop SECONDS  print again every SECONDS until interrupted\n"
    "  --count K           with -l: stop after K prints\n";

memory::SmiSnapshot gather(const memory::Nvml& nvml) {
  memory::SmiSnapshot snap;
  snap.nvml_missing = nvml.why_not();
  snap.devices = nvml.devices();
  for (const memory::GpuDeviceInfo& d : snap.devices) {
    for (memory::GpuProcessInfo& p : nvml.processes(d.index)) snap.processes.push_back(p);
  }
  snap.published = memory::read_published_stats();
  snap.now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  return snap;
}

}  // namespace

int cmd_smi(const std::vector<std::string>& argv) {
  const SmiOptions o = parse_smi_options(argv);
  if (o.help) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  const int64_t loop = o.loop_seconds, count = o.count;
  memory::Nvml nvml;  // opened once for all the prints
  for (int64_t i = 0; count == 0 || i < count; ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::seconds(loop));
    if (loop > 0) {  // a time stamp to tell the prints apart
      const std::time_t t = std::time(nullptr);
      char stamp[64];
      std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", std::localtime(&t));
      std::printf("%s%s\n", i > 0 ? "\n" : "", stamp);
    }
    std::fputs(memory::format_smi(gather(nvml)).c_str(), stdout);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace frugal::tools
