// SQuAD JSON and HF's flattened JSON Lines (data/qa_data.h).
#include "shardtrain/data/qa_data.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <unordered_map>

#include "shardtrain/core/check.h"
#include "shardtrain/core/json_read.h"
#include "shardtrain/core/log.h"
#include "shardtrain/core/text.h"
#include "shardtrain/data/reader.h"

namespace shardtrain {

int64_t utf8_char_count(std::string_view text) {
  int64_t n = 0;
  for (unsigned char byte : text) n += (byte & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

std::vector<int32_t> utf8_char_starts(std::string_view text) {
  std::vector<int32_t> starts;
  starts.reserve(text.size() + 1);
  for (size_t i = 0; i < text.size(); ++i)
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) starts.push_back(static_cast<int32_t>(i));
  starts.push_back(static_cast<int32_t>(text.size()));
  return starts;
}

int32_t next_code_point(std::string_view text, size_t* i) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data()) + *i;
  const size_t left = text.size() - *i;
  const unsigned char lead = s[0];
  const int length = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xE ? 3 : (lead >> 3) == 0x1E ? 4 : 0;
  if (length == 0 || static_cast<size_t>(length) > left) {
    *i += 1;
    return 0xFFFD;
  }
  int32_t cp = length == 1 ? lead : lead & (0xFF >> (length + 1));
  for (int k = 1; k < length; ++k) {
    if ((s[k] & 0xC0) != 0x80) {
      *i += 1;
      return 0xFFFD;
    }
    cp = (cp << 6) | (s[k] & 0x3F);
  }
  *i += static_cast<size_t>(length);
  return cp;
}

bool is_python_space(int32_t c) {
  // CPython's _PyUnicode_IsWhitespace: bidirectional type WS, B or S, or Zs.
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string utf8_substr(std::string_view text, int64_t begin, int64_t end) {
  const std::vector<int32_t> starts = utf8_char_starts(text);
  const int64_t n = static_cast<int64_t>(starts.size()) - 1;
  begin = std::clamp<int64_t>(begin, 0, n);
  end = std::clamp<int64_t>(end, begin, n);
  return std::string(text.substr(starts[begin], starts[end] - starts[begin]));
}

namespace {

std::string qa_quote(const std::string& text) { return "'" + text + "'"; }

// What every question must satisfy, whatever the layout; `where` names it.
void check_qa_example(const QaExample& e, const std::string& where, const QaReadOptions& options,
                      bool impossible) {
  if (e.context.empty()) throw Error(where + ": the context is empty");
  if (!options.read_answers) return;
  if (impossible && !e.answer_texts.empty())
    throw Error(where + ": marked is_impossible but has " + std::to_string(e.answer_texts.size()) + " answers");
  if (e.answer_texts.empty() && !options.allow_unanswered)
    throw Error(where + ": has no answer; SQuAD v2 data (questions without an answer) needs "
                        "data.version_2_with_negative = true");
  const std::vector<int32_t> starts = utf8_char_starts(e.context);
  const int64_t num_chars = static_cast<int64_t>(starts.size()) - 1;
  for (size_t a = 0; a < e.answer_texts.size(); ++a) {
    const std::string& text = e.answer_texts[a];
    const int64_t start = e.answer_starts[a], length = utf8_char_count(text);
    if (start < 0 || start + length > num_chars)
      throw Error(where + str_format(": answer %zu's answer_start %lld (+ %lld characters) is outside the context of "
                                     "%lld characters",
                                     a, static_cast<long long>(start), static_cast<long long>(length),
                                     static_cast<long long>(num_chars)));
    const std::string_view found(e.context.data() + starts[start], starts[start + length] - starts[start]);
    if (found != text)
      throw Error(where + str_format(": answer %zu's answer_start %lld points at ", a, static_cast<long long>(start)) +
                  qa_quote(clip_for_message(std::string(found), 80)) + ", not at the answer text " +
                  qa_quote(clip_for_message(text, 80)) + " (answer_start counts characters, not bytes)");
  }
}

std::string id_where(const std::string& path, const std::string& id) {
  return path + ": question id " + qa_quote(clip_for_message(id, 80));
}

std::string string_field(const nlohmann::json& object, const char* key, const std::string& where) {
  if (!object.is_object() || !object.contains(key)) throw Error(where + ": no \"" + key + "\"");
  const nlohmann::json& value = object[key];
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number_integer()) return std::to_string(value.get<int64_t>());  // ids written as numbers
  throw Error(where + ": \"" + key + "\" = " + json_for_message(value) + ": expected a string");
}

int64_t start_field(const nlohmann::json& value, const std::string& where) {
  if (!value.is_number_integer()) throw Error(where + ": answer_start = " + json_for_message(value) + ": expected an integer");
  return value.get<int64_t>();
}

void add_example(QaTable& table, std::unordered_map<std::string, int64_t>& seen, QaExample example, int64_t line,
                 const std::string& where, const QaReadOptions& options, bool impossible) {
  check_qa_example(example, where, options, impossible);
  const auto [it, fresh] = seen.emplace(example.id, line);
  if (!fresh)
    throw Error(where + ": the id is used twice (first at " + (table.squad_json ? "question " : "line ") +
                std::to_string(it->second) + "); ids must be unique: predictions and scores are keyed by them");
  table.examples.push_back(std::move(example));
  table.line_numbers.push_back(line);
}

void read_squad_json(const nlohmann::json& root, QaTable& table, const QaReadOptions& options) {
  std::unordered_map<std::string, int64_t> seen;
  const nlohmann::json& data = root["data"];
  if (!data.is_array()) throw Error(table.path + ": \"data\" must be an array of articles");
  int64_t number = 0;
  for (size_t a = 0; a < data.size(); ++a) {
    const std::string article = table.path + str_format(": data[%zu]", a);
    if (!data[a].is_object() || !data[a].contains("paragraphs") || !data[a]["paragraphs"].is_array())
      throw Error(article + ": expected an object with a \"paragraphs\" array");
    const nlohmann::json& paragraphs = data[a]["paragraphs"];
    for (size_t p = 0; p < paragraphs.size(); ++p) {
      const std::string paragraph = article + str_format(".paragraphs[%zu]", p);
      const std::string context = string_field(paragraphs[p], "context", paragraph);
      if (!paragraphs[p].contains("qas") || !paragraphs[p]["qas"].is_array())
        throw Error(paragraph + ": no \"qas\" array");
      for (const nlohmann::json& qa : paragraphs[p]["qas"]) {
        ++number;
        QaExample e;
        e.id = string_field(qa, "id", paragraph + str_format(".qas (question %lld)", static_cast<long long>(number)));
        const std::string where = id_where(table.path, e.id);
        e.question = string_field(qa, "question", where);
        e.context = context;
        bool impossible = false;
        if (qa.contains("is_impossible")) {
          if (!qa["is_impossible"].is_boolean()) throw Error(where + ": is_impossible must be true or false");
          impossible = qa["is_impossible"].get<bool>();
        }
        if (options.read_answers && options.answers_if_present && !qa.contains("answers")) {
          ++table.num_without_answers_field;
        } else if (options.read_answers) {
          if (!qa.contains("answers") || !qa["answers"].is_array()) throw Error(where + ": no \"answers\" array");
          for (const nlohmann::json& answer : qa["answers"]) {
            e.answer_texts.push_back(string_field(answer, "text", where + ": an answer"));
            if (!answer.contains("answer_start")) throw Error(where + ": an answer has no \"answer_start\"");
            e.answer_starts.push_back(start_field(answer["answer_start"], where));
          }
        }
        add_example(table, seen, std::move(e), number, where, options, impossible);
      }
    }
  }
}

void read_flat_jsonl(const std::string& content, QaTable& table, const QaReadOptions& options) {
  std::unordered_map<std::string, int64_t> seen;
  size_t begin = 0;
  int64_t line = 0;
  while (begin < content.size()) {
    size_t end = content.find('\n', begin);
    if (end == std::string::npos) end = content.size();
    ++line;
    std::string text = content.substr(begin, end - begin);
    begin = end + 1;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string at_line = table.path + ":" + std::to_string(line);
    const nlohmann::json row = parse_user_json(text, at_line, 8);
    if (!row.is_object()) throw Error(at_line + ": expected a JSON object per line (id, context, question, answers)");
    QaExample e;
    e.id = string_field(row, "id", at_line);
    const std::string where = at_line + ": question id " + qa_quote(clip_for_message(e.id, 80));
    e.question = string_field(row, "question", where);
    e.context = string_field(row, "context", where);
    if (options.read_answers && options.answers_if_present && !row.contains("answers")) {
      ++table.num_without_answers_field;
    } else if (options.read_answers) {
      if (!row.contains("answers") || !row["answers"].is_object())
        throw Error(where + ": no \"answers\" object ({\"text\": [...], \"answer_start\": [...]})");
      const nlohmann::json& answers = row["answers"];
      if (!answers.contains("text") || !answers["text"].is_array() || !answers.contains("answer_start") ||
          !answers["answer_start"].is_array() || answers["text"].size() != answers["answer_start"].size())
        throw Error(where + ": \"answers\" must hold two lists of equal length, \"text\" and \"answer_start\"");
      for (size_t a = 0; a < answers["text"].size(); ++a) {
        if (!answers["text"][a].is_string()) throw Error(where + ": an answer text is not a string");
        e.answer_texts.push_back(answers["text"][a].get<std::string>());
        e.answer_starts.push_back(start_field(answers["answer_start"][a], where));
      }
    }
    add_example(table, seen, std::move(e), line, where, options, false);
  }
}

}  // namespace

QaTable read_qa_table_from_string(const std::string& content, const std::string& path, const QaReadOptions& options) {
  QaTable table;
  table.path = path;
  // One JSON document with a "data" array is SQuAD JSON; HF's JSON Lines
  // (even a one-line file) is not.
  const size_t first = content.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && content[first] == '{') {
    nlohmann::json root = nlohmann::json::parse(content, nullptr, /*allow_exceptions=*/false);
    if (root.is_object() && root.contains("data")) {
      root = parse_user_json(content, path, 16);  // the checked parse (duplicate keys, depth)
      table.squad_json = true;
      read_squad_json(root, table, options);
      return table;
    }
  }
  read_flat_jsonl(content, table, options);
  return table;
}

QaTable read_qa_table(const std::string& path, const QaReadOptions& options) {
  return read_qa_table_from_string(read_data_file(path), path, options);
}

}  // namespace shardtrain
