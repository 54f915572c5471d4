// The options for people: `ckptfs mount --help` and the option table of
// docs/OPTIONS.md, both from the option table.
#include <string>
#include <string_view>

#include "options/mount_options.h"
#include "options/option_table.h"

namespace ckptfs::options {

namespace {

// Removes the Markdown backquotes of a help text, for the terminal.
std::string PlainText(std::string_view help) {
  std::string out;
  for (char c : help) {
    if (c != '`') out.push_back(c);
  }
  return out;
}

// Appends `text` to `out`, wrapped at `width` columns, every line but the
// first indented by `indent` spaces; the first starts at column `column`.
void AppendWrapped(std::string* out, std::string_view text, size_t column, size_t indent,
                   size_t width) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(' ', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view word = text.substr(pos, end - pos);
    if (column > indent && column + 1 + word.size() > width) {
      out->append("\n").append(indent, ' ');
      column = indent;
    } else if (column > indent) {
      out->push_back(' ');
      ++column;
    }
    out->append(word);
    column += word.size();
    pos = end + 1;
  }
}

// "`cache_bytes` for `cache_size`, ..." for the options that have older names.
std::string AliasList(bool markdown) {
  const std::string_view q = markdown ? "`" : "";
  std::string out;
  for (const OptionSpec& spec : OptionTable()) {
    for (std::string_view alias : spec.aliases) {
      if (alias.empty()) continue;
      if (!out.empty()) out += ", ";
      out.append(q).append(alias).append(q).append(" for ").append(q).append(spec.name);
      out.append(q);
    }
  }
  return out;
}

// The fstab options as a list for people: "`defaults`, ..., `x-*`".
std::string FstabOptionList(bool markdown) {
  const std::string_view q = markdown ? "`" : "";
  std::string out;
  for (std::string_view name : FstabOptions()) {
    out.append(q).append(name).append(name.ends_with('=') ? "*" : "").append(q).append(", ");
  }
  out.append(q).append(kFstabPrefix).append("*").append(q);
  return out;
}

}  // namespace

std::string MountOptionsHelp() {
  constexpr size_t kNameWidth = 22, kWidth = 80;
  const MountOptions defaults;
  std::string out;
  AppendWrapped(&out,
                "Mount options (-o NAME[=VALUE],...; sizes take K/M/G/T suffixes). Run-time "
                "ones also change while mounted: echo NAME=VALUE > MOUNTPOINT/.ckptfs/config",
                0, 0, kWidth);
  out += "\n";
  for (const OptionSpec& spec : OptionTable()) {
    std::string name = "  " + std::string(spec.name);
    if (spec.type != OptionType::kFlag) name += "=" + std::string(Placeholder(spec));
    if (!spec.off_name.empty()) name += ", " + std::string(spec.off_name);
    out += name;
    size_t column = name.size();
    if (column + 1 >= kNameWidth) {
      out += "\n";
      column = 0;
    }
    out.append(kNameWidth - column, ' ');
    std::string text = PlainText(spec.help) +
                       ". Default: " + OptionValueHuman(spec, spec.field.get(defaults)) +
                       (spec.runtime ? "; run-time." : ".");
    AppendWrapped(&out, text, kNameWidth, kNameWidth, kWidth);
    out += "\n";
  }
  std::string aliases = "Older names still work: " + AliasList(/*markdown=*/false) + ".";
  AppendWrapped(&out, aliases, 0, 2, kWidth);
  out += "\n";
  std::string fstab = "Accepted and ignored, for /etc/fstab and mount(8): " +
                      FstabOptionList(/*markdown=*/false) + ".";
  AppendWrapped(&out, fstab, 0, 2, kWidth);
  out += "\n";
  return out;
}

std::string OptionsMarkdown() {
  const MountOptions defaults;
  std::string out =
      "| option | default | meaning | changes while mounted |\n"
      "| --- | --- | --- | --- |\n";
  for (const OptionSpec& spec : OptionTable()) {
    std::string name = "`" + std::string(spec.name);
    if (spec.type != OptionType::kFlag) name += "=" + std::string(Placeholder(spec));
    name += "`";
    out += "| " + name + " | " + OptionValueHuman(spec, spec.field.get(defaults)) + " | " +
           std::string(spec.help) + " | " + (spec.runtime ? "yes" : "no") + " |\n";
  }
  out += "\nOlder names still work, as mount options and in `.ckptfs/config`: " +
         AliasList(/*markdown=*/true) + ".\n";
  out += "\nAccepted and ignored, for `/etc/fstab` and mount(8): " +
         FstabOptionList(/*markdown=*/true) + ".\n";
  return out;
}

}  // namespace ckptfs::options
