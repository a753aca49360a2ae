// The training config: INI parsing, --set overrides, errors that say where
// and suggest the closest key, and the resolved text a resume parses back.
#include <gtest/gtest.h>

#include "anneal/config.h"
#include "anneal/error.h"

namespace anneal {
namespace {

const char* kExample =
    "# the example from the issue\n"
    "name      = fmnist-mlp\n"
    "dataset   = fmnist@latest\n"
    "layers    = dense(256) relu dense(128) relu dense(10)\n"
    "loss      = softmax_ce\n"
    "optimizer = adam\n"
    "lr        = 0.001\n"
    "batch     = 128\n"
    "epochs    = 10\n"
    "seed      = 1\n";

// The overrides named as cli/ names them (its flag), so the messages below
// read as the user sees them.
const SettingSources kCli{.overrides = "--set"};

std::string error_of(const std::string& text, const std::vector<std::string>& sets = {}) {
  try {
    parse_train_config(text, "cfg.ini", sets, kCli);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage) << e.what();
    return e.what();
  }
  return "(no error)";
}

TEST(RunsConfig, ParsesTheExample) {
  TrainConfig c = parse_train_config(kExample, "cfg.ini", {});
  EXPECT_EQ(c.name, "fmnist-mlp");
  EXPECT_EQ(c.dataset, "fmnist@latest");
  EXPECT_EQ(c.trainer.layers, "dense(256) relu dense(128) relu dense(10)");
  EXPECT_EQ(c.loss, std::optional<LossKind>(LossKind::kSoftmaxCrossEntropy));
  EXPECT_EQ(c.trainer.optimizer.kind, OptimizerKind::kAdam);
  EXPECT_FLOAT_EQ(c.trainer.optimizer.lr, 0.001f);
  EXPECT_EQ(c.trainer.batch, 128);
  EXPECT_EQ(c.trainer.epochs, 10);
  EXPECT_EQ(c.trainer.seed, 1u);
  EXPECT_EQ(c.kind, runs::ModelKindId::kNetwork);
  EXPECT_EQ(c.sources.at("lr"), "cfg.ini:7");
}

TEST(RunsConfig, SetWinsOverTheFile) {
  TrainConfig c = parse_train_config(kExample, "cfg.ini", {"lr=0.05", "epochs = 3", "optimizer=sgd", "momentum=0.9",
                                                            "nesterov=true", "early_stop=train_loss:2",
                                                            "checkpoint_every=30s", "precision=bf16"},
                                 kCli);
  EXPECT_FLOAT_EQ(c.trainer.optimizer.lr, 0.05f);
  EXPECT_EQ(c.trainer.epochs, 3);
  EXPECT_EQ(c.trainer.optimizer.kind, OptimizerKind::kSgd);
  EXPECT_TRUE(c.trainer.optimizer.nesterov);
  EXPECT_EQ(c.trainer.early_stop, EarlyStopMetric::kTrainLoss);
  EXPECT_EQ(c.trainer.patience, 2);
  EXPECT_DOUBLE_EQ(c.checkpoint_every.seconds, 30);
  EXPECT_EQ(c.trainer.precision, Precision::kBf16);
  EXPECT_EQ(c.sources.at("lr"), "--set lr");
  // A caller that is not the CLI names no flag: the default is words.
  EXPECT_EQ(parse_train_config(kExample, "cfg.ini", {"lr=0.05"}).sources.at("lr"), "override lr");
  try {
    parse_train_config(kExample, "cfg.ini", {"lr"});
    ADD_FAILURE() << "an override without '=' was taken";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "override lr: expected key=value");
  }
}

TEST(RunsConfig, UnknownKeysNameTheLineAndTheClosestKey) {
  EXPECT_EQ(error_of(std::string(kExample) + "epoch = 3\n"), "cfg.ini:11: unknown key 'epoch'; did you mean 'epochs'?");
  EXPECT_EQ(error_of(kExample, {"learning_rate=1"}), "--set learning_rate=1: unknown key 'learning_rate'; did you mean 'lr'?");
  EXPECT_EQ(error_of(kExample, {"lr"}), "--set lr: expected key=value");
}

TEST(RunsConfig, BadValuesSayWhereAndWhatWasExpected) {
  EXPECT_EQ(error_of(kExample, {"batch=0"}), "--set batch: batch = '0': expected an integer in 1..16777216");
  EXPECT_NE(error_of(std::string(kExample) + "validation = 2\n").find("cfg.ini:11: validation = '2'"), std::string::npos);
  EXPECT_NE(error_of(kExample, {"optimizer=adma"}).find("did you mean 'adam'"), std::string::npos);
  EXPECT_NE(error_of(kExample, {"early_stop=val_loss"}).find("METRIC:PATIENCE"), std::string::npos);
  EXPECT_NE(error_of(kExample, {"early_stop=val_loss:2"}).find("validation"), std::string::npos);
  EXPECT_NE(error_of(kExample, {"checkpoint_every=10q"}).find("expected a step count"), std::string::npos);
  EXPECT_NE(error_of(kExample, {"nesterov=maybe"}).find("true or false"), std::string::npos);
  EXPECT_EQ(error_of("name = x\nlayers = linear\n"), "cfg.ini: missing key 'dataset'");
  EXPECT_NE(error_of(std::string(kExample) + "lr = 0.1\n").find("set twice"), std::string::npos);
}

// A line that is not key = value, a [section] or a comment names its line.
// One holding Boost's own placeholder "%invalid_line%" made Boost's message
// substitute itself forever (found by the fuzzer: a hang, not an error).
TEST(RunsConfig, ALineThatIsNoSettingNamesItsLine) {
  EXPECT_EQ(error_of(std::string(kExample) + "  garbage here  # note\n"),
            "cfg.ini:11: 'garbage here': expected key = value, a [section] or a # comment");
  EXPECT_EQ(error_of("name = x\n%invalid_line% %option%\n"),
            "cfg.ini:2: '%invalid_line% %option%': expected key = value, a [section] or a # comment");
  EXPECT_EQ(error_of("name = x\nbell\x07" + std::string(100, 'y') + "\n"),
            "cfg.ini:2: 'bell\\x07" + std::string(75, 'y') + "...': expected key = value, a [section] or a # comment");
}

// Issue 31: a config without layers (or with layers = auto) searches; its
// keys read, refuse bad values naming the key, and write back for a resume.
TEST(RunsConfig, NoLayersMeansAutoWithItsBudgetKeys) {
  TrainConfig c = parse_train_config("name = x\ndataset = d\n", "cfg.ini", {});
  EXPECT_TRUE(c.auto_search);
  EXPECT_EQ(c.time_budget, std::optional<double>(120));
  EXPECT_FALSE(c.max_trials);
  EXPECT_EQ(c.folds, 5);
  EXPECT_NE(c.to_text().find("layers = auto\n"), std::string::npos) << c.to_text();
  EXPECT_NE(c.to_text().find("time_budget = 2m\n"), std::string::npos) << c.to_text();
  TrainConfig back = parse_train_config(c.to_text(), "recorded", {});
  EXPECT_TRUE(back.auto_search);
  EXPECT_EQ(back.to_text(), c.to_text());

  TrainConfig trials = parse_train_config("name = x\ndataset = d\nlayers = auto\nmax_trials = 4\nfolds = 3\n", "cfg.ini", {});
  EXPECT_EQ(trials.max_trials, std::optional<std::int64_t>(4));
  EXPECT_FALSE(trials.time_budget) << "max_trials without a time_budget: no time limit";
  EXPECT_EQ(trials.folds, 3);
  EXPECT_EQ(parse_train_config(trials.to_text(), "recorded", {}).to_text(), trials.to_text());
  TrainConfig both = parse_train_config("name = x\ndataset = d\nmax_trials = 4\ntime_budget = 5m\n", "cfg.ini", {});
  EXPECT_EQ(both.time_budget, std::optional<double>(300));

  EXPECT_EQ(error_of("name = x\ndataset = d\ntime_budget = soon\n"),
            "cfg.ini:3: time_budget = 'soon': expected a duration such as 120s, 5m or 1h, or none");
  EXPECT_NE(error_of("name = x\ndataset = d\n", {"time_budget=120"}).find("--set time_budget: time_budget = '120'"),
            std::string::npos);
  EXPECT_NE(error_of("name = x\ndataset = d\n", {"time_budget=0s"}).find("expected a duration"), std::string::npos);
  EXPECT_NE(error_of("name = x\ndataset = d\n", {"max_trials=0"}).find("max_trials = '0'"), std::string::npos);
  EXPECT_NE(error_of("name = x\ndataset = d\n", {"folds=1"}).find("folds = '1'"), std::string::npos);

  // Every other config keeps its meaning.
  TrainConfig network = parse_train_config(kExample, "cfg.ini", {});
  EXPECT_FALSE(network.auto_search);
  EXPECT_EQ(network.trainer.layers, "dense(256) relu dense(128) relu dense(10)");
  EXPECT_FALSE(parse_train_config(network.to_text(), "recorded", {}).auto_search);
}

// Issue 29: `--set name=模型` said "invalid dataset name".
TEST(RunsConfig, AnInvalidModelNameNamesTheKeyAndSaysModelName) {
  for (const std::string& name : std::vector<std::string>{"模型", "-lead", "has space", std::string(129, 'm')}) {
    const std::string set = error_of(kExample, {"name=" + name});
    EXPECT_TRUE(set.starts_with("--set name: name = '" + name + "': expected a model name")) << set;
    EXPECT_EQ(set.find("dataset"), std::string::npos) << set;
  }
  const std::string file = error_of("name = 模型\ndataset = d\nlayers = dense(3)\n");
  EXPECT_TRUE(file.starts_with("cfg.ini:1: name = '模型': expected a model name")) << file;
  EXPECT_NO_THROW(parse_train_config(kExample, "cfg.ini", {"name=a.b_c-9"}));
}

TEST(RunsConfig, ResolvedTextParsesBackToTheSameConfig) {
  TrainConfig c = parse_train_config(kExample, "cfg.ini", {"lr=0.0003", "validation=0.15", "threads=3",
                                                            "checkpoint_every=250", "weight_decay=0.01"});
  TrainConfig back = parse_train_config(c.to_text(), "run config", {});
  EXPECT_EQ(back.to_text(), c.to_text());
  EXPECT_EQ(back.trainer.optimizer.lr, c.trainer.optimizer.lr);
  EXPECT_EQ(back.trainer.optimizer.weight_decay, c.trainer.optimizer.weight_decay);
  EXPECT_EQ(back.validation, c.validation);
  EXPECT_EQ(back.threads, 3);
  EXPECT_EQ(back.checkpoint_every.steps, 250);
  EXPECT_NE(c.to_text().find("lr = 0.0003\n"), std::string::npos);
}

// Regression (issue 12): `--set label=y#z` was checked as 'y#z', frozen as
// "label = y#z" and read back as 'y'; a line break could add a key.
TEST(RunsConfig, SetValuesTheFrozenTextCannotCarryAreRefused) {
  EXPECT_NE(error_of(kExample, {"label=y#z"}).find("--set label: the value may not contain '#'"), std::string::npos);
  EXPECT_NE(error_of(kExample, {"label=y#z"}).find("0-based index"), std::string::npos);
  EXPECT_NE(error_of(kExample, {"name=a\nepochs=99"}).find("line break"), std::string::npos);
  EXPECT_NE(error_of(kExample, {"name=a\repochs=99"}).find("line break"), std::string::npos);
  // Every value that is accepted reads back unchanged.
  for (const char* set : {"label=y z", "label=col=3", "name=a-b_c.d", "dataset=x@v2"}) {
    TrainConfig c = parse_train_config(kExample, "cfg.ini", {set});
    EXPECT_EQ(parse_train_config(c.to_text(), "frozen", {}).to_text(), c.to_text()) << set;
  }
}

TEST(RunsConfig, EarlyStopAutoStopsOnValidationLossAndRestoresTheBestEpoch) {
  // auto: val_loss:10 with a validation split, none without one; recorded
  // resolved, so the frozen text says what the run did.
  TrainConfig with = parse_train_config(kExample, "cfg.ini", {"validation=0.1"});
  EXPECT_EQ(with.trainer.early_stop, EarlyStopMetric::kValLoss);
  EXPECT_EQ(with.trainer.patience, 10);
  EXPECT_TRUE(with.trainer.restore_best);
  EXPECT_NE(with.to_text().find("early_stop = val_loss:10\n"), std::string::npos);
  EXPECT_NE(with.to_text().find("restore_best = true\n"), std::string::npos);
  TrainConfig without = parse_train_config(kExample, "cfg.ini", {"validation=0"});
  EXPECT_EQ(without.trainer.early_stop, EarlyStopMetric::kNone);
  EXPECT_NE(without.to_text().find("early_stop = none\n"), std::string::npos);
  // What a user writes wins.
  TrainConfig off = parse_train_config(kExample, "cfg.ini", {"validation=0.1", "early_stop=none"});
  EXPECT_EQ(off.trainer.early_stop, EarlyStopMetric::kNone);
  TrainConfig last = parse_train_config(kExample, "cfg.ini", {"validation=0.1", "early_stop=val_accuracy:3",
                                                              "restore_best=false"});
  EXPECT_EQ(last.trainer.early_stop, EarlyStopMetric::kValAccuracy);
  EXPECT_EQ(last.trainer.patience, 3);
  EXPECT_FALSE(last.trainer.restore_best);
  EXPECT_EQ(parse_train_config(last.to_text(), "frozen", {}).to_text(), last.to_text());
  EXPECT_NE(error_of(kExample, {"restore_best=maybe"}).find("restore_best"), std::string::npos);
}

TEST(RunsConfig, LinearLayersMeanTheLinearModel) {
  TrainConfig c = parse_train_config("name = a\ndataset = b\nlayers = linear\n", "cfg.ini", {});
  EXPECT_EQ(c.kind, runs::ModelKindId::kLinear);
  EXPECT_NE(c.to_text().find("layers = linear"), std::string::npos);
}

TEST(RunsConfig, TreesLayersMeanBoostedTreesWithTheirOwnKeys) {
  TrainConfig c = parse_train_config("name = a\ndataset = b\nlayers = trees\ntree_depth = 4\ntree_lr = 0.05\n", "cfg.ini", {});
  EXPECT_EQ(c.kind, runs::ModelKindId::kTrees);
  EXPECT_TRUE(c.trainer.layers.empty());
  EXPECT_EQ(c.trees.max_depth, 4);
  EXPECT_DOUBLE_EQ(c.trees.learning_rate, 0.05);
  EXPECT_EQ(c.trees.max_rounds, 300);
  EXPECT_EQ(c.trees.early_stopping_rounds, 50);
  // The frozen text names every tree key and reads back the same.
  const std::string text = c.to_text();
  EXPECT_NE(text.find("layers = trees\n"), std::string::npos);
  EXPECT_NE(text.find("tree_depth = 4\n"), std::string::npos);
  EXPECT_EQ(parse_train_config(text, "frozen", {}).to_text(), text);
  EXPECT_NE(error_of("name = a\ndataset = b\nlayers = trees\ntree_depth = 0\n").find("tree_depth"), std::string::npos);
  EXPECT_NE(error_of("name = a\ndataset = b\nlayers = trees\ntree_subsample = 1.5\n").find("tree_subsample"),
            std::string::npos);
}

// One table row per key gives its default, reads it and writes it back:
// every key with a default is in the resolved text, which reads back the
// same; loss and class_weight are typed once, at parsing.
TEST(RunsConfig, EveryKeyOfTheTableIsWrittenAndReadsBack) {
  TrainConfig c = parse_train_config("name = m\ndataset = d\nlayers = dense(2)\n", "m.ini", {});
  const std::string text = c.to_text();
  for (const ConfigKey& k : known_config_keys())
    if (*k.default_value) {
      EXPECT_NE(text.find(std::string(k.name) + " = "), std::string::npos) << k.name;
    }
  EXPECT_EQ(parse_train_config(text, "frozen", {}).to_text(), text);
  EXPECT_FALSE(c.loss);
  EXPECT_TRUE(c.class_weight.empty());

  TrainConfig typed = parse_train_config("name = m\ndataset = d\nlayers = dense(2)\nloss = bce\n"
                                         "class_weight = yes:5, no : 1.5\n", "m.ini", {});
  EXPECT_EQ(typed.loss, std::optional<LossKind>(LossKind::kBinaryCrossEntropy));
  EXPECT_FALSE(typed.class_weight.balanced);
  EXPECT_EQ(typed.class_weight.weights,
            (std::vector<std::pair<std::string, double>>{{"yes", 5.0}, {"no", 1.5}}));
  EXPECT_NE(typed.to_text().find("class_weight = yes:5,no:1.5\n"), std::string::npos);
  EXPECT_NE(typed.to_text().find("loss = bce\n"), std::string::npos);
  EXPECT_EQ(parse_train_config(typed.to_text(), "frozen", {}).to_text(), typed.to_text());
  // A bad class_weight is refused where it was written, not later by the run.
  EXPECT_EQ(error_of("name = m\ndataset = d\nlayers = dense(2)\nclass_weight = yes:0\n").rfind("cfg.ini:4: class_weight", 0),
            0u);
}

// warm_start: a bare word is an alias of the config's own name; with '@' a
// model reference. Only the syntax is checked here (parsing reads no store).
TEST(RunsConfig, WarmStartNamesAnAliasOrAModel) {
  TrainConfig none = parse_train_config(kExample, "cfg.ini", {});
  EXPECT_FALSE(none.warm_start);
  EXPECT_EQ(none.to_text().find("warm_start"), std::string::npos);

  TrainConfig alias = parse_train_config(std::string(kExample) + "warm_start = production\n", "cfg.ini", {});
  EXPECT_EQ(alias.sources.at("warm_start"), "cfg.ini:11");
  ASSERT_TRUE(alias.warm_start);
  ModelRef ref = *alias.warm_start;
  EXPECT_EQ(ref.name, "fmnist-mlp");
  EXPECT_EQ(ref.alias, std::optional<std::string>("production"));
  EXPECT_FALSE(ref.version);

  ModelRef other = *parse_train_config(kExample, "cfg.ini", {"warm_start=base-mlp@staging"}).warm_start;
  EXPECT_EQ(other.name, "base-mlp");
  EXPECT_EQ(other.alias, std::optional<std::string>("staging"));

  TrainConfig exact = parse_train_config(kExample, "cfg.ini", {"warm_start=fmnist-mlp@v3"});
  ModelRef version = *exact.warm_start;
  EXPECT_EQ(version.version, std::optional<int>(3));
  EXPECT_FALSE(version.alias);
  // The resolved text carries it and reads back (what a resume parses).
  EXPECT_NE(exact.to_text().find("warm_start = fmnist-mlp@v3\n"), std::string::npos);
  EXPECT_EQ(parse_train_config(exact.to_text(), "run-1 config", {}).warm_start->to_string(), "fmnist-mlp@v3");
  // A bare alias of the config's own model is written back bare.
  EXPECT_NE(alias.to_text().find("warm_start = production\n"), std::string::npos);
}

TEST(RunsConfig, MalformedWarmStartIsAUsageErrorNamingItsSource) {
  for (const char* bad : {"warm_start=a@@b", "warm_start=v3", "warm_start=latest", "warm_start=a b", "warm_start=@v1",
                          "warm_start=x@", "warm_start=-prod"}) {
    std::string e = error_of(kExample, {bad});
    EXPECT_EQ(e.rfind("--set warm_start: warm_start = '", 0), 0u) << bad << ": " << e;
    EXPECT_NE(e.find("expected an alias of 'fmnist-mlp'"), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  EXPECT_EQ(error_of(std::string(kExample) + "warm_start = a@@b\n").rfind("cfg.ini:11: warm_start = 'a@@b'", 0), 0u);
}

}  // namespace
}  // namespace anneal
