// The flag table (train/args/flag_table.h) covers Arguments: every field is some row's (else its flag
// would be missing from the argument dump and the ranks' agreement text, and checkpoints would not
// compare it), and each row's flag sets its field and reaches the dump and the agreement text.
#include <algorithm>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "train/args/argument_table.h"
#include "train/args/arguments.h"
#include "train/args/flag_table.h"

namespace gpt {
namespace {

// Arguments' fields that are not flags: which flags were given, and the start-up notes.
constexpr size_t kNonFlagFields = 2;

// The number of fields of an aggregate: the most initializers `T{...}` accepts (Boost.PFR's
// method). AnyField converts to any field type; it is used only in unevaluated requires-expressions.
struct AnyField {
  template <typename T>
  operator T() const;
};

template <typename T, size_t... I>
constexpr bool brace_initializable(std::index_sequence<I...>) {
  return requires { T{(static_cast<void>(I), AnyField{})...}; };
}

template <typename T, size_t Lo, size_t Hi>
constexpr size_t aggregate_field_count() {
  if constexpr (Lo == Hi) {
    return Lo;
  } else {
    constexpr size_t kMid = (Lo + Hi + 1) / 2;
    if constexpr (brace_initializable<T>(std::make_index_sequence<kMid>{})) {
      return aggregate_field_count<T, kMid, Hi>();
    } else {
      return aggregate_field_count<T, Lo, kMid - 1>();
    }
  }
}

static_assert(std::is_aggregate_v<Arguments>, "the field count below needs Arguments to stay an aggregate");

struct ByteRange {
  size_t begin = 0, end = 0, alignment = 1;
};

template <typename Field>
ByteRange bytes_of(Field Arguments::*member) {
  static const Arguments probe;
  const size_t begin =
      static_cast<size_t>(reinterpret_cast<const char*>(&(probe.*member)) - reinterpret_cast<const char*>(&probe));
  return {begin, begin + sizeof(Field), alignof(Field)};
}

ByteRange bytes_of(const ArgumentField& field) {
  return std::visit([](auto member) { return bytes_of(member); }, field);
}

size_t round_up(size_t value, size_t alignment) { return (value + alignment - 1) / alignment * alignment; }

TEST(FlagTable, EveryArgumentsFieldHasARow) {
  constexpr size_t kFields = aggregate_field_count<Arguments, 0, 512>();
  std::set<size_t> fields;
  for (const FlagRow& row : flag_rows()) fields.insert(bytes_of(row.field).begin);
  EXPECT_EQ(fields.size(), flag_rows().size()) << "two rows set the same field";
  EXPECT_EQ(kFields, fields.size() + kNonFlagFields)
      << "Arguments has " << kFields << " fields, the flag table's rows set " << fields.size() << " of them and "
      << kNonFlagFields << " are not flags (given, notes): a field added to Arguments needs its row in "
      << "train/args/flag_table.cc (EveryByteOfArgumentsIsInARow says where, unless it fits in alignment padding)";
}

// Where a field without a row sits: every byte of Arguments is a row's field, a non-flag field,
// or the padding that aligns the next field. (A field small enough to hide in such padding is found
// only by EveryArgumentsFieldHasARow.)
TEST(FlagTable, EveryByteOfArgumentsIsInARow) {
  std::vector<std::pair<ByteRange, std::string>> fields;
  for (const FlagRow& row : flag_rows()) fields.emplace_back(bytes_of(row.field), std::string(row.flag));
  fields.emplace_back(bytes_of(&Arguments::given), "given");
  fields.emplace_back(bytes_of(&Arguments::notes), "notes");
  std::sort(fields.begin(), fields.end(), [](const auto& x, const auto& y) { return x.first.begin < y.first.begin; });
  size_t end = 0;
  std::string previous = "(the start)";
  for (const auto& [range, name] : fields) {
    EXPECT_GE(range.begin, end) << name << " overlaps " << previous;
    EXPECT_EQ(range.begin, round_up(end, range.alignment))
        << "bytes [" << end << ", " << range.begin << ") of Arguments, between the fields of " << previous << " and "
        << name << ", are in no row of train/args/flag_table.cc";
    end = range.end;
    previous = name;
  }
  EXPECT_EQ(sizeof(Arguments), round_up(end, alignof(Arguments)))
      << "bytes [" << end << ", " << sizeof(Arguments) << ") of Arguments, after the field of " << previous
      << ", are in no row of train/args/flag_table.cc";
}

// A value for the row's flag that differs from the field's default.
std::vector<std::string> other_value(const FlagRow& row, const Arguments& defaults) {
  struct Visitor {
    const FlagRow& row;
    const Arguments& defaults;
    std::vector<std::string> operator()(int64_t Arguments::*m) const { return {defaults.*m == 7 ? "8" : "7"}; }
    std::vector<std::string> operator()(double Arguments::*m) const { return {defaults.*m == 0.25 ? "0.75" : "0.25"}; }
    std::vector<std::string> operator()(bool Arguments::*m) const {
      EXPECT_FALSE(defaults.*m) << row.flag << ": a switch whose default is true cannot be turned on";
      return {};
    }
    std::vector<std::string> operator()(std::string Arguments::*m) const {
      return {defaults.*m == "x_value" ? "y_value" : "x_value"};
    }
    std::vector<std::string> operator()(std::vector<std::string> Arguments::*) const {
      if (row.nargs == Nargs::kThree) return {"1", "2", "3"};
      return {"a_prefix"};
    }
  };
  return std::visit(Visitor{row, defaults}, row.field);
}

// Each row's flag, given once with another value, sets the row's field (and only the flags it
// names are given), and changes the row's line in the agreement text and in the dump.
TEST(FlagTable, EachFlagSetsItsFieldAndReachesTheTables) {
  const absl::StatusOr<Arguments> defaults = parse_arguments(std::vector<std::string>{"pretrain_gpt"});
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  for (const FlagRow& row : flag_rows()) {
    std::vector<std::string> argv = {"pretrain_gpt", std::string(row.flag)};
    for (std::string& value : other_value(row, *defaults)) argv.push_back(std::move(value));
    const absl::StatusOr<Arguments> parsed = parse_arguments(argv);
    ASSERT_TRUE(parsed.ok()) << row.flag << ": " << parsed.status();
    EXPECT_EQ(parsed->given, std::set<std::string>{std::string(row.flag)});
    const bool changed = std::visit([&](auto m) -> bool { return !((*parsed).*m == (*defaults).*m); }, row.field);
    EXPECT_TRUE(changed) << row.flag << " did not set its row's field";
    EXPECT_NE(flag_canonical_text(row, *parsed), flag_canonical_text(row, *defaults)) << row.flag;
    EXPECT_NE(python_str(flag_python_value(row, *parsed)), python_str(flag_python_value(row, *defaults))) << row.flag;
    // Every other field keeps its default.
    for (const FlagRow& other : flag_rows()) {
      if (&other == &row) continue;
      EXPECT_EQ(flag_canonical_text(other, *parsed), flag_canonical_text(other, *defaults))
          << row.flag << " changed the field of " << other.flag;
    }
  }
}

// The argument table (the dump and the agreement text) has one entry per row, in the table's
// order.
TEST(FlagTable, ArgumentTableHasEveryRowOnce) {
  std::vector<const FlagRow*> ordered;
  for (const FlagRow& row : flag_rows()) ordered.push_back(&row);
  ASSERT_EQ(ordered.size(), flag_rows().size());
  EXPECT_EQ(std::set<const FlagRow*>(ordered.begin(), ordered.end()).size(), ordered.size());
  const Arguments defaults;
  const std::vector<ArgumentEntry> table = argument_table(defaults);
  ASSERT_EQ(table.size(), ordered.size());
  std::set<std::string> dests;
  for (size_t i = 0; i < table.size(); ++i) {
    EXPECT_EQ(table[i].flag, ordered[i]->flag);
    EXPECT_EQ(table[i].dest, flag_dest(*ordered[i]));
    EXPECT_TRUE(dests.insert(table[i].dest).second) << table[i].dest << " twice";
  }
}

// --help and the Megatron flag table list exactly the rows (and the undeclared refused flags).
TEST(FlagTable, HelpAndMegatronTableListTheRows) {
  const absl::StatusOr<Arguments> help = parse_arguments(std::vector<std::string>{"pretrain_gpt", "--help"});
  ASSERT_TRUE(absl::IsCancelled(help.status()));
  const std::string table = megatron_flag_table();
  for (const FlagRow& row : flag_rows()) {
    const std::string text(help.status().message());
    const size_t at = text.find("  " + std::string(row.flag));
    const size_t after = at + 2 + row.flag.size();
    EXPECT_TRUE(at != std::string::npos && after < text.size() && (text[after] == ' ' || text[after] == '\n'))
        << row.flag << " is not in --help";
    const std::string line = "{\"flag\": \"" + std::string(row.flag) + "\", \"status\": \"" +
                             std::string(flag_status_name(row.megatron_status)) + "\", \"declared\": true";
    EXPECT_NE(table.find(line), std::string::npos) << row.flag;
  }
  for (const RefusedMegatronFlag& refused : undeclared_refused_megatron_flags()) {
    EXPECT_EQ(find_flag_row(refused.flag), nullptr) << refused.flag << " is declared and refused before parsing";
    const std::string line =
        "{\"flag\": \"" + std::string(refused.flag) + "\", \"status\": \"refused\", \"declared\": false";
    EXPECT_NE(table.find(line), std::string::npos) << refused.flag;
  }
  size_t lines = 0;
  for (char c : table) lines += c == '\n';
  EXPECT_EQ(lines, flag_rows().size() + undeclared_refused_megatron_flags().size());
}

// Each row's declared constraint (FlagConstraint) is checked under the row's own flag: the
// defaults pass, and a value outside the constraint is refused with a message that starts with the
// flag and says what it must be. flag_name finds the row of a field.
TEST(FlagTable, RowConstraintsAreCheckedUnderTheirFlag) {
  const Arguments defaults;
  EXPECT_EQ(check_flag_constraints(defaults).message(), "");
  int checked = 0;
  for (const FlagRow& row : flag_rows()) {
    EXPECT_EQ(find_flag_row(row.flag), &row) << row.flag << " is found by its name";
    if (row.constraint.check == FlagCheck::kNone || row.constraint.required) continue;
    Arguments a;
    a.given.insert(std::string(row.flag));
    std::string expected;
    if (const auto* text = std::get_if<std::string Arguments::*>(&row.field)) {
      a.*(*text) = "bogus";
      expected = "(got bogus)";
    } else if (const auto* integer = std::get_if<int64_t Arguments::*>(&row.field)) {
      a.*(*integer) = row.constraint.check == FlagCheck::kRange ? row.constraint.high + 1 : -1;
      expected = absl::StrCat("(got ", a.*(*integer), ")");
    } else if (const auto* number = std::get_if<double Arguments::*>(&row.field)) {
      a.*(*number) = -1.0;
      expected = "(got -1)";
    }
    const std::string message(check_flag_constraints(a).message());
    EXPECT_EQ(message.rfind(std::string(row.flag) + " must be ", 0), 0u) << row.flag << ": " << message;
    EXPECT_NE(message.find(expected), std::string::npos) << row.flag << ": " << message;
    ++checked;
  }
  EXPECT_GT(checked, 30);
}

}  // namespace
}  // namespace gpt
