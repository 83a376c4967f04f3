// The YAML reading rules every netfold config shares: key paths and lines in
// errors, unknown and duplicate keys, numbers in decimal and hex with a
// maximum, strings that must have a value, YAML booleans, optional keys, and
// no exception ever escaping.
#include "config/yaml_reader.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace netfold::config {
namespace {

using ::testing::HasSubstr;

YAML::Node Yaml(const char* text) {
  absl::StatusOr<YAML::Node> node = ParseYaml(text);
  EXPECT_TRUE(node.ok()) << node.status();
  return node.ok() ? *node : YAML::Node();
}

std::string Error(const absl::Status& s) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  return std::string(s.message());
}

TEST(YamlReader, SyntaxErrorsNameTheLine) {
  absl::StatusOr<YAML::Node> node = ParseYaml("a: 1\nb: [unclosed\n");
  ASSERT_FALSE(node.ok());
  EXPECT_THAT(Error(node.status()), HasSubstr("YAML syntax error"));
  EXPECT_THAT(Error(node.status()), HasSubstr("line"));
}

TEST(YamlReader, PathsJoinKeysAndIndices) {
  EXPECT_EQ(KeyPath("", "name"), "name");
  EXPECT_EQ(KeyPath("capacity", "slots"), "capacity.slots");
  EXPECT_EQ(IndexPath("static.qps", 1), "static.qps[1]");
  EXPECT_EQ(KeyPath(IndexPath("static.qps", 1), "psn"), "static.qps[1].psn");
}

TEST(YamlReader, CheckKeysRefusesUnknownKeysWithTheirLine) {
  const YAML::Node root = Yaml("name: a\nnmae: b\n");
  EXPECT_TRUE(CheckKeys(root, {"name", "nmae"}, "").ok());
  EXPECT_EQ(Error(CheckKeys(root, {"name"}, "")), "line 2: unknown key 'nmae' (known: name)");
  const YAML::Node nested = Yaml("capacity:\n  slots: 3\n  sluts: 4\n");
  EXPECT_EQ(Error(CheckKeys(nested["capacity"], {"slots", "qps"}, "capacity")),
            "capacity (line 3): unknown key 'sluts' (known: slots, qps)");
}

TEST(YamlReader, CheckKeysRefusesDuplicateKeys) {
  // yaml-cpp keeps both and would silently read the first. (ParseYaml
  // refuses such a document already; CheckKeys does not rely on it.)
  const YAML::Node root = YAML::Load("name: a\nslots: 1\nname: b\n");
  EXPECT_EQ(Error(CheckKeys(root, {"name", "slots"}, "")),
            "line 3: duplicate key 'name' (first on line 1)");
  const YAML::Node flow = YAML::Load("capacity: {slots: 1, slots: 2}\n");
  EXPECT_THAT(Error(CheckKeys(flow["capacity"], {"slots"}, "capacity")),
              HasSubstr("capacity (line 1): duplicate key 'slots'"));
}

// Issue 23 item 11: a duplicated key in any mapping of any config file is
// an error naming the key and its line, also where no parser looks.
TEST(YamlReader, ParseYamlRefusesADuplicateKeyInAnyMapping) {
  auto error = [](const char* text) {
    absl::StatusOr<YAML::Node> n = ParseYaml(text);
    return n.ok() ? std::string("accepted") : Error(n.status());
  };
  EXPECT_EQ(error("listen: a\nlog_level: info\nlisten: b\n"),
            "line 3: duplicate key 'listen' (first on line 1)");
  EXPECT_EQ(error("limits:\n  max_jobs: 1\n  max_jobs: 2\n"),
            "limits (line 3): duplicate key 'max_jobs' (first on line 2)");
  EXPECT_EQ(error("switches:\n  - {name: a, tier: 0}\n  - {name: b, name: c}\n"),
            "switches[1] (line 3): duplicate key 'name' (first on line 3)");
  // Quoting or tagging does not make a key different.
  EXPECT_THAT(error("a: 1\n\"a\": 2\n"), HasSubstr("duplicate key 'a'"));
  EXPECT_THAT(error("a: 1\n!!str a: 2\n"), HasSubstr("duplicate key 'a'"));
  // Deep inside a value nobody reads.
  EXPECT_THAT(error("x: [[{k: 1, k: 2}]]\n"), HasSubstr("x[0][0] (line 1): duplicate key 'k'"));
  // The same key in two different mappings is fine.
  EXPECT_EQ(error("a: {k: 1}\nb: {k: 2}\nc: [{k: 1}, {k: 2}]\n"), "accepted");
}

TEST(YamlReader, ParseYamlRefusesAliasBombs) {
  // Nine levels of nine aliases: 9^9 nodes in a few hundred bytes.
  std::string text = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i <= 9; ++i) {
    text += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int j = 0; j < 9; ++j) text += (j ? ", *a" : "*a") + std::to_string(i - 1);
    text += "]\n";
  }
  absl::StatusOr<YAML::Node> n = ParseYaml(text);
  ASSERT_FALSE(n.ok());
  EXPECT_THAT(Error(n.status()), HasSubstr("more than"));
}

TEST(YamlReader, CheckKeysWantsAMap) {
  EXPECT_EQ(Error(CheckKeys(Yaml("capacity: 5\n")["capacity"], {"slots"}, "capacity")),
            "capacity (line 1): expected a map");
  EXPECT_THAT(Error(CheckKeys(Yaml("- a\n- b\n"), {"name"}, "")), HasSubstr("expected a map"));
  // A key that is not a scalar makes yaml-cpp throw inside; we return.
  EXPECT_FALSE(CheckKeys(Yaml("{[a, b]: 1}\n"), {"a"}, "").ok());
}

TEST(YamlReader, NumbersAreDecimalOrHexUpToTheMaximum) {
  const YAML::Node n = Yaml(
      "a: 42\nb: 0x1F\nc: 0XfF\nd: 256\ne: -3\nf: many\ng: [1]\nh:\n"
      "i: 18446744073709551615\nj: 18446744073709551616\nk: 0x\n");
  EXPECT_EQ(*ReadUint(n["a"], "a", 100), 42u);
  EXPECT_EQ(*ReadUint(n["b"], "b", 100), 31u);
  EXPECT_EQ(*ReadUint(n["c"], "c", 255), 255u);
  EXPECT_EQ(*ReadUint(n["i"], "i", UINT64_MAX), UINT64_MAX);
  EXPECT_EQ(Error(ReadUint(n["d"], "d", 255).status()), "d (line 4): 256 is larger than 255");
  EXPECT_EQ(Error(ReadUint(n["e"], "e", 255).status()),
            "e (line 5): '-3' is not a non-negative integer");
  EXPECT_THAT(Error(ReadUint(n["f"], "f", 255).status()),
              HasSubstr("'many' is not a non-negative"));
  EXPECT_EQ(Error(ReadUint(n["g"], "g", 255).status()), "g (line 7): expected a number");
  EXPECT_EQ(Error(ReadUint(n["h"], "h", 255).status()), "h: no value, expected a number");
  EXPECT_THAT(Error(ReadUint(n["j"], "j", UINT64_MAX).status()), HasSubstr("is larger than"));
  EXPECT_THAT(Error(ReadUint(n["k"], "k", 255).status()), HasSubstr("not a non-negative"));
  EXPECT_EQ(Error(ReadUint(n["absent"], "x.absent", 255).status()), "x.absent: missing");
}

TEST(YamlReader, StringsMustHaveAValue) {
  const YAML::Node n = Yaml("a: text\nb: \"\"\nc:\nd: {x: 1}\ne: 12\n");
  EXPECT_EQ(*ReadString(n["a"], "a"), "text");
  EXPECT_EQ(*ReadString(n["b"], "b"), "");
  EXPECT_EQ(*ReadString(n["e"], "e"), "12");
  // `manager:` with the address forgotten must not mean "no manager".
  EXPECT_EQ(Error(ReadString(n["c"], "c").status()),
            "c: no value, expected a string (\"\" for an empty one)");
  EXPECT_EQ(Error(ReadString(n["d"], "d").status()),
            "d (line 4): expected a string (\"\" for an empty one)");
  EXPECT_EQ(Error(ReadString(n["z"], "z").status()), "z: missing");
}

TEST(YamlReader, BooleansAreYamls) {
  const YAML::Node n = Yaml("a: true\nb: no\nc: On\nd: FALSE\ne: maybe\n");
  EXPECT_TRUE(*ReadBool(n["a"], "a"));
  EXPECT_FALSE(*ReadBool(n["b"], "b"));
  EXPECT_TRUE(*ReadBool(n["c"], "c"));
  EXPECT_FALSE(*ReadBool(n["d"], "d"));
  EXPECT_EQ(Error(ReadBool(n["e"], "e").status()), "e (line 5): 'maybe' is not true or false");
}

TEST(YamlReader, ListsOfNumbers) {
  const YAML::Node n = Yaml("ranks: [0, 0x10, 7]\nbad: [1, x]\nempty: []\nscalar: 3\n");
  EXPECT_EQ(*ReadUintList(n["ranks"], "ranks", 100), (std::vector<uint64_t>{0, 16, 7}));
  EXPECT_TRUE(ReadUintList(n["empty"], "empty", 100)->empty());
  EXPECT_THAT(Error(ReadUintList(n["bad"], "bad", 100).status()),
              HasSubstr("bad[1] (line 2): 'x' is not"));
  EXPECT_EQ(Error(ReadUintList(n["scalar"], "scalar", 100).status()),
            "scalar (line 4): expected a list");
}

TEST(YamlReader, OptionalKeysLeaveTheDefaultWhenAbsent) {
  const YAML::Node t =
      Yaml("transport: {retry_count: 5, poll_us: 150, busy: yes, name: x}\n")["transport"];
  uint8_t retry = 7, absent_number = 9;
  absl::Duration poll = absl::ZeroDuration(), absent_duration = absl::Seconds(1);
  bool busy = false, absent_bool = true;
  std::string name, absent_string = "kept";
  EXPECT_TRUE(ReadOptionalUint(t, "retry_count", "transport", 7, &retry).ok());
  EXPECT_TRUE(ReadOptionalUint(t, "none", "transport", 7, &absent_number).ok());
  EXPECT_TRUE(
      ReadOptionalDuration(t, "poll_us", "transport", absl::Microseconds(1), 1000000, &poll).ok());
  EXPECT_TRUE(
      ReadOptionalDuration(t, "none", "transport", absl::Microseconds(1), 1000000, &absent_duration)
          .ok());
  EXPECT_TRUE(ReadOptionalBool(t, "busy", "transport", &busy).ok());
  EXPECT_TRUE(ReadOptionalBool(t, "none", "transport", &absent_bool).ok());
  EXPECT_TRUE(ReadOptionalString(t, "name", "transport", &name).ok());
  EXPECT_TRUE(ReadOptionalString(t, "none", "transport", &absent_string).ok());
  EXPECT_EQ(retry, 5);
  EXPECT_EQ(absent_number, 9);
  EXPECT_EQ(poll, absl::Microseconds(150));
  EXPECT_EQ(absent_duration, absl::Seconds(1));
  EXPECT_TRUE(busy);
  EXPECT_TRUE(absent_bool);
  EXPECT_EQ(name, "x");
  EXPECT_EQ(absent_string, "kept");
  EXPECT_EQ(Error(ReadOptionalUint(t, "retry_count", "transport", 3, &retry)),
            "transport.retry_count (line 1): 5 is larger than 3");
  EXPECT_EQ(retry, 5);  // untouched by the error
  EXPECT_THAT(
      Error(ReadOptionalDuration(t, "poll_us", "transport", absl::Microseconds(1), 100, &poll)),
      HasSubstr("transport.poll_us (line 1): 150 is larger than 100"));
}

TEST(YamlReader, ErrorAtIsTheSameStyle) {
  const YAML::Node n = Yaml("a:\n  qpn: 1\n");
  EXPECT_EQ(Error(ErrorAt(n["a"]["qpn"], "a.qpn", "QPN 1 is reserved")),
            "a.qpn (line 2): QPN 1 is reserved");
  EXPECT_EQ(Error(ErrorAt(n["b"], "b", "needed")), "b: needed");
}

TEST(YamlReader, FilesNameThemselves) {
  absl::StatusOr<std::string> missing = ReadTextFile("/nonexistent/netfold.yaml");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("/nonexistent/netfold.yaml"));
  const absl::Status in_file =
      InFile(absl::InvalidArgumentError("capacity (line 1): expected a map"), "/etc/x.yaml");
  EXPECT_EQ(in_file.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(in_file.message(), "/etc/x.yaml: capacity (line 1): expected a map");
  EXPECT_TRUE(InFile(absl::OkStatus(), "/etc/x.yaml").ok());
}

}  // namespace
}  // namespace netfold::config
