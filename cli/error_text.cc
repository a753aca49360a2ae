#include "error_text.h"

namespace anneal::cli {
namespace {

// The flag that gives each subject. The same concept has the same flag in
// every command (submit's --cores and worker's --cores are both cores).
const char* flag_of(Subject subject) {
  switch (subject) {
    case Subject::kNone: return "";
    case Subject::kJobCores: return "--cores";
    case Subject::kJobRetries: return "--retries";
    case Subject::kJobTimeout: return "--timeout";
    case Subject::kJobRanks: return "--ranks";
    case Subject::kJobHostfile: return "--hostfile";
    case Subject::kKeyFile: return "--key-file";
    case Subject::kNewKeyFile: return "--new-key-file";
    case Subject::kWorkerCores: return "--cores";
    case Subject::kWorkerMaxJobs: return "--max-jobs";
    case Subject::kWorkerLease: return "--lease";
    case Subject::kDataFile: return "FILE";
    case Subject::kLabelsFile: return "--labels";
    case Subject::kTestFile: return "--test";
    case Subject::kTestLabelsFile: return "--test-labels";
    case Subject::kFormat: return "--format";
    case Subject::kLabelColumn: return "--label";
    case Subject::kCategoricalColumn: return "--categorical";
    case Subject::kTestFraction: return "--split";
    case Subject::kNonFinitePolicy: return "--nonfinite";
    case Subject::kDatasetPart: return "--part";
    case Subject::kOutputFile: return "-o";
    case Subject::kEvalSplit: return "--split";
    case Subject::kPredictInput: return "--input";
    case Subject::kResumedRun: return "--resume";
    case Subject::kConfigOverrides: return "--set";
    case Subject::kRetrainData: return "--data";
    case Subject::kDevice: return "--device";
    case Subject::kMemoryBudget: return "--memory-budget";
    case Subject::kThreads: return "--threads";
    case Subject::kBenchBatch: return "--batch";
    case Subject::kBenchRepeats: return "--repeats";
    case Subject::kBenchSeconds: return "--seconds";
    case Subject::kCalibrationData: return "--calib";
    case Subject::kCalibrationSamples: return "--calib-samples";
    case Subject::kCalibrationMethod: return "--method";
    case Subject::kQatEpochs: return "--qat-epochs";
    case Subject::kQatLearningRate: return "--qat-lr";
    case Subject::kQatBatch: return "--qat-batch";
    case Subject::kPruneSparsity: return "--sparsity";
    case Subject::kPruneSchedule: return "--schedule";
    case Subject::kPruneStructured: return "--structured";
    case Subject::kPruneGlobal: return "--global";
    case Subject::kFinetuneEpochs: return "--finetune-epochs";
    case Subject::kFinetuneLearningRate: return "--lr";
    case Subject::kFinetuneData: return "--data";
    case Subject::kDateFormat: return "--date-format";
    case Subject::kTokensFile: return "--tokens";
    case Subject::kListenAddress: return "--bind";
  }
  return "";
}

}  // namespace

std::string remedy_command(Remedy remedy, const std::string& argument) {
  switch (remedy) {
    case Remedy::kNone: return "";
    case Remedy::kReplaceExisting: return " (pass --force to replace it)";
    case Remedy::kDeclareCategorical: return "; use --categorical " + argument;
    case Remedy::kReadNonFiniteAsMissing: return " (--nonfinite missing reads such values as missing)";
    case Remedy::kRaiseColumnLimit: return " (pass --max-columns N to raise the limit)";
    case Remedy::kRaiseDecompressedSize:
      return "; pass --max-decompressed-size BYTES to raise the limit (or decompress the file first)";
    case Remedy::kRaiseDecompressionRatio:
      return "; pass --max-decompression-ratio N to raise the limit (or decompress the file first)";
    case Remedy::kCheckStore: return "; run 'anneal fsck'";
    case Remedy::kCreateStore: return " (create one with 'anneal init')";
    case Remedy::kListDatasets: return " (see 'anneal data list')";
    case Remedy::kListRuns: return " (see 'anneal runs list')";
    case Remedy::kListModels: return " (see 'anneal model list')";
    case Remedy::kListAliases: return " (see 'anneal model alias list')";
    case Remedy::kListJobs: return " (see 'anneal jobs list')";
    case Remedy::kReimportWithLabel: return "; import it again with --label " + argument;
    case Remedy::kResumeRun: return "; 'anneal train --resume " + argument + "' continues it";
    case Remedy::kStartWorker: return "; the next 'anneal worker' takes it over";
    case Remedy::kCheckDateFormat: return "; check --date-format " + argument;
    case Remedy::kEncryptStore: return "; 'anneal encrypt --key-file FILE' encrypts it";
    case Remedy::kFinishRotation: return "; run 'anneal rekey' again with the same --key-file and --new-key-file to finish it";
    case Remedy::kGiveKey: return "; give its key with --key-file FILE, $ANNEAL_KEY_FILE or the systemd credential anneal-key";
    case Remedy::kRotateKey: return "; 'anneal rekey' changes the key";
    case Remedy::kCollectGarbage: return "; 'anneal gc' removes them";
    case Remedy::kRetryJob: return "; 'anneal jobs retry " + argument + "' runs it again";
    case Remedy::kImportNewVersion: return "; 'anneal data import' of a new version reads them";
  }
  return "";
}

std::string error_text(const Error& error) {
  return Error::compose(flag_of(error.subject()), error.detail()) +
         remedy_command(error.remedy(), error.remedy_argument());
}

}  // namespace anneal::cli
