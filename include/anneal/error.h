// anneal::Error: the one way errors travel in anneal.
//
// Every layer below cli/ reports failure by throwing anneal::Error (or letting
// a std::exception escape for programming errors). The kind decides the exit
// code; the message is one line that says where (file:line:column, key,
// object) and what was expected. cli/ catches it once, prints it and exits
// with exit_code(kind). Nothing catches an Error to drop it silently.
//
// Layers below cli/ do not know the command line: they name the input an
// error is about (a Subject) and what would fix it (a Remedy) as concepts,
// and what() says them in words ("the job's core count must be at least
// 1"). cli/error_text.cc says the same error with the flags and commands
// that give the input or do the fix ("--cores must be at least 1").
#pragma once

#include <stdexcept>
#include <string>

namespace anneal {

enum class ErrorKind {
  kFailure,   // anything else: I/O, corruption, internal            -> exit 1
  kUsage,     // a bad flag, option value or config key             -> exit 2
  kBadData,   // malformed input data (CSV, IDX, LIBSVM, ...)        -> exit 65
  kNotFound,  // a named dataset, version, model or run does not exist -> exit 1
  kCorrupt,   // an object or catalog row failed verification       -> exit 1
  kBusy,      // a lock is held by another process                  -> exit 75
};

// Process exit codes: the one place they are defined. docs/USAGE.md
// ("Exit codes") documents them; cli/main.cc's help text (and the man page made from it) is checked
// at compile time to describe exactly the codes in kExitCodes.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitDataCheckFailed = 3;  // a data check found drift (data check)
inline constexpr int kExitGateRefused = 4;  // trained, but a gate refused the promotion
inline constexpr int kExitBadData = 65;     // sysexits.h EX_DATAERR
inline constexpr int kExitBusy = 75;        // sysexits.h EX_TEMPFAIL
inline constexpr int kExitInterrupted = 130;  // 128 + SIGINT, as a shell reports it: stopped by a signal
                                              // after writing a checkpoint

// Every exit code anneal uses, in ascending order.
inline constexpr int kExitCodes[] = {kExitOk,      kExitFailure,  kExitUsage, kExitDataCheckFailed, kExitGateRefused,
                                     kExitBadData, kExitBusy,    kExitInterrupted};

inline int exit_code(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kUsage: return kExitUsage;
    case ErrorKind::kBadData: return kExitBadData;
    case ErrorKind::kBusy: return kExitBusy;
    case ErrorKind::kFailure:
    case ErrorKind::kNotFound:
    case ErrorKind::kCorrupt: return kExitFailure;
  }
  return kExitFailure;
}

// The input of an operation an error is about, as a concept. The message
// then starts with the subject (subject_name() below cli/, its flag in
// cli/) followed by the error's detail.
enum class Subject {
  kNone,
  kJobCores,             // the cores a job needs
  kJobRetries,           // how often a failed job is run again
  kJobTimeout,           // how long a job may run
  kJobRanks,             // how many processes a job runs on
  kJobHostfile,          // the hosts a job of several ranks runs on
  kKeyFile,              // the file holding the store's key
  kNewKeyFile,           // the file holding the key a rotation switches to
  kWorkerCores,          // the cores a worker runs jobs on
  kWorkerMaxJobs,        // how many jobs a worker runs before it exits
  kWorkerLease,          // how long a worker's claim on a job lasts unrenewed
  kDataFile,             // the file an import reads
  kLabelsFile,           // an import's IDX labels file
  kTestFile,             // an import's separate test file
  kTestLabelsFile,       // the IDX labels of that test file
  kFormat,               // an import's input format
  kLabelColumn,          // the column an import reads as the label
  kCategoricalColumn,    // a column an import is told is categorical
  kTestFraction,         // the fraction of rows an import splits off as test
  kNonFinitePolicy,      // how NaN and infinities in input are read
  kDatasetPart,          // a stored part (stream) of a dataset version
  kOutputFile,           // the file an export or a prediction writes
  kEvalSplit,            // which split of a dataset a model is scored on
  kPredictInput,         // the file a model predicts on
  kResumedRun,           // the run a training resumes
  kConfigOverrides,      // settings given to override a config file's
  kRetrainData,          // a new data file a retrain imports first
  kDevice,               // the device a run trains or a model predicts on
  kMemoryBudget,         // bytes of dataset rows a run may hold in memory
  kThreads,              // compute threads of a command
  kBenchBatch,           // rows per forward pass of a bench
  kBenchRepeats,         // timed repeats of a bench
  kBenchSeconds,         // how long a bench times in all
  kCalibrationData,      // the dataset an int8 model is calibrated on
  kCalibrationSamples,   // how many rows calibrate
  kCalibrationMethod,    // how activation ranges are chosen
  kQatEpochs,            // epochs of quantization-aware training
  kQatLearningRate,      // its learning rate
  kQatBatch,             // its batch size
  kPruneSparsity,        // the fraction of weights pruning removes
  kPruneSchedule,        // oneshot or gradual
  kPruneStructured,      // pruning whole neurons or channels
  kPruneGlobal,          // one magnitude threshold over all layers
  kFinetuneEpochs,       // epochs of training after pruning
  kFinetuneLearningRate, // its learning rate
  kFinetuneData,         // the dataset pruning fine-tunes on
  kDateFormat,           // a date format an import is given (for one column or any)
  kTokensFile,           // the file of bearer tokens a server accepts
  kListenAddress,        // the address a server listens on
};

// What the user can do about an error, as a concept. The message ends with
// it (remedy words below cli/, the flag or command that does it in cli/).
enum class Remedy {
  kNone,
  kReplaceExisting,          // ask for the existing file to be replaced
  kDeclareCategorical,       // declare the column (the remedy's argument) categorical
  kReadNonFiniteAsMissing,   // read NaN and infinities as missing values
  kRaiseColumnLimit,         // allow more columns
  kRaiseDecompressedSize,    // allow a larger decompressed size
  kRaiseDecompressionRatio,  // allow a higher decompression ratio
  kCheckStore,               // check the store for damage
  kCreateStore,              // create a store at that path
  kListDatasets,             // see which datasets exist
  kListRuns,                 // see which runs exist
  kListModels,               // see which models exist
  kListAliases,              // see which aliases are set
  kListJobs,                 // see which jobs exist
  kReimportWithLabel,        // import the dataset again with the label (the argument)
  kResumeRun,                // resume the run (the argument) from its last checkpoint
  kStartWorker,              // start a worker, which takes over expired jobs
  kCheckDateFormat,          // check the date format given for a column (the argument: COLUMN=FORMAT)
  kEncryptStore,             // encrypt the store (with the key given)
  kFinishRotation,           // run the interrupted key rotation again, with the same two keys
  kGiveKey,                  // give the store's key
  kRotateKey,                // rotate the store's key instead
  kCollectGarbage,           // collect the store's garbage (unreferenced objects, stale files)
  kRetryJob,                 // give the job (the argument) another attempt
  kImportNewVersion,         // import a new version of the dataset
};

// The subject in words, as what() starts with it: "the job's core count".
inline const char* subject_name(Subject subject);
// The remedy in words, as what() ends with it (with its separator, e.g.
// "; check the store for damage"); `argument` is the column it names, if any.
inline std::string remedy_text(Remedy remedy, const std::string& argument);

class Error : public std::runtime_error {
 public:
  // An error whose whole message is `message`.
  Error(ErrorKind kind, const std::string& message) : Error(kind, Subject::kNone, message) {}
  // An error about `subject`: what() is subject_name(subject), then `detail`
  // (after a space, or directly when it starts with ':'), then the remedy.
  Error(ErrorKind kind, Subject subject, const std::string& detail, Remedy remedy = Remedy::kNone,
        const std::string& remedy_argument = "")
      : std::runtime_error(compose(subject_name(subject), detail) + remedy_text(remedy, remedy_argument)),
        kind_(kind),
        subject_(subject),
        detail_(detail),
        remedy_(remedy),
        remedy_argument_(remedy_argument) {}

  // The same error with `remedy` (naming `argument`, if it takes one).
  Error with(Remedy remedy, const std::string& argument = "") const {
    return Error(kind_, subject_, detail_, remedy, argument);
  }

  ErrorKind kind() const { return kind_; }
  Subject subject() const { return subject_; }
  const std::string& detail() const { return detail_; }  // the message without subject and remedy
  Remedy remedy() const { return remedy_; }
  const std::string& remedy_argument() const { return remedy_argument_; }

  // "SUBJECT DETAIL" (or "SUBJECT: ..." when detail starts with ':'); just
  // DETAIL for an empty subject.
  static std::string compose(const std::string& subject, const std::string& detail) {
    if (subject.empty()) return detail;
    return subject + (detail.starts_with(':') ? "" : " ") + detail;
  }

 private:
  ErrorKind kind_;
  Subject subject_;
  std::string detail_;
  Remedy remedy_;
  std::string remedy_argument_;
};

inline const char* subject_name(Subject subject) {
  switch (subject) {
    case Subject::kNone: return "";
    case Subject::kJobCores: return "the job's core count";
    case Subject::kJobRetries: return "the job's retry count";
    case Subject::kJobTimeout: return "the job's timeout";
    case Subject::kJobRanks: return "the job's rank count";
    case Subject::kJobHostfile: return "the job's hostfile";
    case Subject::kKeyFile: return "the key file";
    case Subject::kNewKeyFile: return "the new key file";
    case Subject::kWorkerCores: return "the worker's core count";
    case Subject::kWorkerMaxJobs: return "the worker's job limit";
    case Subject::kWorkerLease: return "the worker's lease";
    case Subject::kDataFile: return "the data file";
    case Subject::kLabelsFile: return "the labels file";
    case Subject::kTestFile: return "the test file";
    case Subject::kTestLabelsFile: return "the test labels file";
    case Subject::kFormat: return "the input format";
    case Subject::kLabelColumn: return "the label column";
    case Subject::kCategoricalColumn: return "the categorical column";
    case Subject::kTestFraction: return "the test fraction";
    case Subject::kNonFinitePolicy: return "the non-finite value policy";
    case Subject::kDatasetPart: return "the dataset part";
    case Subject::kOutputFile: return "the output file";
    case Subject::kEvalSplit: return "the split";
    case Subject::kPredictInput: return "the input file";
    case Subject::kResumedRun: return "the resumed run";
    case Subject::kConfigOverrides: return "the config overrides";
    case Subject::kRetrainData: return "the new data";
    case Subject::kDevice: return "the device";
    case Subject::kMemoryBudget: return "the memory budget";
    case Subject::kThreads: return "the thread count";
    case Subject::kBenchBatch: return "the bench's batch size";
    case Subject::kBenchRepeats: return "the bench's repeat count";
    case Subject::kBenchSeconds: return "the bench's duration";
    case Subject::kCalibrationData: return "the calibration data";
    case Subject::kCalibrationSamples: return "the calibration row count";
    case Subject::kCalibrationMethod: return "the calibration method";
    case Subject::kQatEpochs: return "the quantization-aware training epochs";
    case Subject::kQatLearningRate: return "the quantization-aware training learning rate";
    case Subject::kQatBatch: return "the quantization-aware training batch size";
    case Subject::kPruneSparsity: return "the pruned fraction";
    case Subject::kPruneSchedule: return "the pruning schedule";
    case Subject::kPruneStructured: return "structured pruning";
    case Subject::kPruneGlobal: return "global pruning";
    case Subject::kFinetuneEpochs: return "the fine-tuning epochs";
    case Subject::kFinetuneLearningRate: return "the fine-tuning learning rate";
    case Subject::kFinetuneData: return "the fine-tuning data";
    case Subject::kDateFormat: return "the date format";
    case Subject::kTokensFile: return "the tokens file";
    case Subject::kListenAddress: return "the listening address";
  }
  return "";
}

inline std::string remedy_text(Remedy remedy, const std::string& argument) {
  switch (remedy) {
    case Remedy::kNone: return "";
    case Remedy::kReplaceExisting: return " (replacing it was not asked for)";
    case Remedy::kDeclareCategorical: return "; declare column '" + argument + "' categorical to read it as text";
    case Remedy::kReadNonFiniteAsMissing: return " (such values can be read as missing)";
    case Remedy::kRaiseColumnLimit: return " (the column limit can be raised)";
    case Remedy::kRaiseDecompressedSize:
      return "; the decompressed size limit can be raised (or decompress the file first)";
    case Remedy::kRaiseDecompressionRatio:
      return "; the decompression ratio limit can be raised (or decompress the file first)";
    case Remedy::kCheckStore: return "; check the store for damage";
    case Remedy::kCreateStore: return " (create a store there first)";
    case Remedy::kListDatasets: return " (list the datasets to see which exist)";
    case Remedy::kListRuns: return " (list the runs to see which exist)";
    case Remedy::kListModels: return " (list the models to see which exist)";
    case Remedy::kListAliases: return " (list the aliases to see which are set)";
    case Remedy::kListJobs: return " (list the jobs to see which exist)";
    case Remedy::kReimportWithLabel: return "; import it again with label '" + argument + "'";
    case Remedy::kResumeRun: return "; resuming " + argument + " continues it";
    case Remedy::kStartWorker: return "; the next worker to start takes it over";
    case Remedy::kCheckDateFormat: return "; check the date format given as " + argument;
    case Remedy::kEncryptStore: return "; encrypting it is a command of its own";
    case Remedy::kFinishRotation: return "; run the rotation again with the same old and new keys to finish it";
    case Remedy::kGiveKey: return "; give its key (a key file, $ANNEAL_KEY_FILE or the systemd credential anneal-key)";
    case Remedy::kRotateKey: return "; changing the key is a rotation, a command of its own";
    case Remedy::kCollectGarbage: return "; collecting the store's garbage removes them";
    case Remedy::kRetryJob: return "; retrying " + argument + " runs it again";
    case Remedy::kImportNewVersion: return "; a new version imported now reads them";
  }
  return "";
}

// Shorthands for the common kinds, so call sites read as what went wrong.
inline Error usage_error(const std::string& m) { return Error(ErrorKind::kUsage, m); }
inline Error data_error(const std::string& m) { return Error(ErrorKind::kBadData, m); }
inline Error not_found(const std::string& m) { return Error(ErrorKind::kNotFound, m); }
inline Error corrupt(const std::string& m) { return Error(ErrorKind::kCorrupt, m); }
inline Error failure(const std::string& m) { return Error(ErrorKind::kFailure, m); }
inline Error busy(const std::string& m) { return Error(ErrorKind::kBusy, m); }
inline Error usage_error(Subject s, const std::string& detail) { return Error(ErrorKind::kUsage, s, detail); }

}  // namespace anneal
