#!/bin/sh
# Checks that the documentation is self-contained and its links hold:
#   (a) no file of the project cites notes that are not in the repository;
#   (b) every relative Markdown link in README.md, docs/*.md and bench/README.md points at an
#       existing file, and a #anchor into a Markdown file names one of its headings;
#   (c) every docs/<name>.md cited by the headers, tools, examples, benchmarks and tests exists.
# Run from anywhere; needs no build.
set -u
cd "$(dirname "$0")/.."
. tests/check_lib.sh

# The project's files: tracked and new ones (not build output), or every file outside build/
# when this is not a git checkout.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git ls-files -co --exclude-standard -- docs bench tools examples include tests README.md Makefile >"$tmp/all"
else
  find docs bench tools examples include tests README.md Makefile -type f 2>/dev/null | sed 's|^\./||' >"$tmp/all"
fi
while IFS= read -r f; do [ -f "$f" ] && printf '%s\n' "$f"; done <"$tmp/all" >"$tmp/files"

# ---- (a) no citation of notes kept outside the repository ----------------------------------
# The names are assembled from pieces so that this script does not match itself.
for name in "../sha""red" "SEMAN""TICS.md" "ALGOR""ITHMS.md" "DES""IGN.md" "BASE""LINES.md"; do
  : >"$tmp/hits"
  while IFS= read -r f; do
    grep -I -n -F -- "$name" "$f" 2>/dev/null | sed "s|^|    $f:|" >>"$tmp/hits"
  done <"$tmp/files"
  if [ -s "$tmp/hits" ]; then bad "'$name' is cited, but users do not have it:"; head -20 "$tmp/hits"
  else ok; fi
done

# The project speaks of itself to its users, not of its work items: no "issue 12" in the pages,
# programs and headers users read (tests may keep their history).
: >"$tmp/hits"
while IFS= read -r f; do
  case $f in tests/*) continue ;; esac
  grep -I -n -i -E -- "issue[s]? [0-9]|the issue'?s? " "$f" 2>/dev/null | sed "s|^|    $f:|" >>"$tmp/hits"
done <"$tmp/files"
if [ -s "$tmp/hits" ]; then bad "work items are named where users read:"; head -20 "$tmp/hits"
else ok; fi

# ---- (b) relative links in the Markdown pages -------------------------------------------------
# anchors_of FILE: the GitHub anchors of FILE's headings (outside code fences), one per line:
# lower case, punctuation other than '-' and '_' dropped, spaces turned into '-'.
anchors_of() {
  awk '/^```/ { fence = !fence; next } !fence && /^#+ / { sub(/^#+ +/, ""); print }' "$1" |
    tr 'A-Z' 'a-z' | sed -e 's/[^a-z0-9 _-]//g' -e 's/ /-/g'
}

for page in README.md docs/*.md bench/README.md; do
  [ -f "$page" ] || continue
  dir=$(dirname "$page")
  # every ](target) outside code fences and inline code spans
  awk '/^```/ { fence = !fence; next } !fence { gsub(/`[^`]*`/, ""); print }' "$page" |
    grep -o '\]([^)]*)' | sed -e 's/^](//' -e 's/)$//' -e 's/ .*//' >"$tmp/links"
  while IFS= read -r link; do
    case $link in
      http://* | https://* | mailto:* | "") continue ;;
    esac
    path=${link%%#*}
    anchor=""
    case $link in *"#"*) anchor=${link#*#} ;; esac
    if [ -z "$path" ]; then target=$page; else target=$dir/$path; fi
    if [ ! -e "$target" ]; then bad "$page: link ($link): $target does not exist"; continue; fi
    if [ -n "$anchor" ]; then
      case $target in
        *.md)
          if ! anchors_of "$target" | grep -qx -- "$anchor"; then
            bad "$page: link ($link): $target has no heading with anchor #$anchor"; continue
          fi ;;
      esac
    fi
    ok
  done <"$tmp/links"
done

# ---- (c) docs/<name>.md cited in code, benchmarks and tests exists -----------------------------
grep -E '^(include/.*\.h|tools/|examples/.*\.c|bench/|tests/)' "$tmp/files" | while IFS= read -r f; do
  grep -I -o 'docs/[A-Za-z0-9_.-]*\.md' "$f" 2>/dev/null | sed "s|^|$f |"
done | sort -u >"$tmp/cited"
while read -r f doc; do
  if [ -f "$doc" ]; then ok; else bad "$f cites $doc, which does not exist"; fi
done <"$tmp/cited"

summary docs
