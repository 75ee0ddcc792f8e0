//! The docs say what holds, in the repository's own words: the map
//! (`docs/architecture.md`) stays short enough to read at one sitting, and
//! no doc or source comment sends its reader somewhere they cannot follow.
//!
//! A citation of that kind is an issue (the word "issue" or "issues"
//! followed by a number, or in the possessive, or a bare `#` and a number;
//! a public repository's `owner/name#123` can be followed and stays
//! allowed), or a note kept outside the repository (the team's design,
//! style, wire-format, cloud, production and routing notes, or the folder
//! they live in). The rule or fact such a citation stood for is written
//! out instead.
//!
//! Read are `README.md`, `CHANGELOG.md` (an entry that names an issue
//! sends its reader to the tracker just the same), every `.md` under
//! `docs/`, and every comment (`//`, `//!`, `///`, `/* */`) of a `.rs`
//! file, tests included.

use std::path::{Path, PathBuf};

use super::lex;

/// The map, and its longest allowed length in lines.
const MAP: &str = "docs/architecture.md";
const MAP_MAX: usize = 300;

/// The notes kept outside the repository, by the stem their citations
/// use: `NAME.md`, `NAME §2` and `NAME's` all cite one. Built from pieces
/// so that this file does not cite them itself.
const OUTSIDE_NOTES: [&str; 6] = [
    concat!("DES", "IGN"),
    concat!("STY", "LE"),
    concat!("wire-", "formats"),
    concat!("clo", "uds"),
    concat!("produc", "tion"),
    concat!("rout", "ing"),
];

/// The folder outside the repository that holds those notes.
const OUTSIDE_FOLDER: &str = concat!("../", "shared");

/// The map's length, if it is over [`MAP_MAX`] lines.
pub(crate) fn map_length(root: &Path) -> Option<String> {
    let text = std::fs::read_to_string(root.join(MAP)).ok()?;
    let lines = text.lines().count();
    (lines > MAP_MAX).then(|| {
        format!(
            "{MAP}: {lines} lines (at most {MAP_MAX}: inventories belong in each crate's \
             lib.rs Layout, recipes in docs/recipes.md)"
        )
    })
}

/// Every citation of an issue or of a note outside the repository in the
/// docs and in the comments of `files`.
pub(crate) fn problems(root: &Path, files: &[PathBuf]) -> Vec<String> {
    let mut docs = vec![root.join("README.md"), root.join("CHANGELOG.md")];
    collect_markdown(&root.join("docs"), &mut docs);
    let mut problems = Vec::new();
    for file in docs.iter().chain(files) {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        let shown = file.strip_prefix(root).unwrap_or(file).display();
        let lines: Vec<(usize, &str)> = if file.extension().is_some_and(|e| e == "rs") {
            lex::comments(&text)
        } else {
            text.lines().enumerate().map(|(n, l)| (n + 1, l)).collect()
        };
        for (line, what) in cited_lines(&lines) {
            problems.push(format!(
                "{shown}:{line}: cites {what}, which its reader cannot follow: state the rule itself"
            ));
        }
    }
    problems
}

/// The citations in `lines` (numbered), each at the line it starts on: a
/// citation wrapped onto the next line (`issue` / `31`) is read across the
/// break, as its reader reads it.
fn cited_lines(lines: &[(usize, &str)]) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (i, &(n, line)) in lines.iter().enumerate() {
        if let Some(what) = cited(line) {
            found.push((n, what));
            continue;
        }
        let Some(&(m, next)) = lines.get(i + 1) else {
            continue;
        };
        if m != n + 1 || cited(next).is_some() {
            continue;
        }
        let next = next.trim_start().trim_start_matches(['/', '!', '*', '>']);
        if let Some(what) = cited(&format!("{} {}", line.trim_end(), next.trim_start())) {
            found.push((n, what));
        }
    }
    found
}

/// What `line` cites that lies outside the repository, if anything.
pub(crate) fn cited(line: &str) -> Option<String> {
    issue_number(line)
        .or_else(|| outside_note(line))
        .or_else(|| {
            line.contains(OUTSIDE_FOLDER)
                .then(|| format!("`{OUTSIDE_FOLDER}`"))
        })
}

/// The word for an issue (or its plural) before a number or `#` and a
/// number, in any case, or in the possessive; or a bare `#` and a number.
fn issue_number(line: &str) -> Option<String> {
    let lower = line.to_ascii_lowercase();
    for (at, _) in lower.match_indices("issue") {
        let before = lower[..at].bytes().next_back();
        if before.is_some_and(lex::is_ident) {
            continue;
        }
        let rest = lower[at + 5..]
            .strip_prefix('s')
            .unwrap_or(&lower[at + 5..]);
        let rest = rest.trim_start_matches([' ', '#']);
        let numbered = rest.starts_with(|c: char| c.is_ascii_digit());
        if (numbered && rest.len() < lower[at + 5..].len()) || lower[at + 5..].starts_with("'s") {
            return Some(format!("an issue (`{}`)", words(&line[at..], 2)));
        }
    }
    let b = line.as_bytes();
    line.match_indices('#').find_map(|(at, _)| {
        let before = at.checked_sub(1).map(|p| b[p]);
        // `owner/name#12` is a public one; `&#12;` is an HTML entity.
        let qualified =
            before.is_some_and(|c| lex::is_ident(c) || matches!(c, b'/' | b'&' | b'-' | b'.'));
        let digits = b[at + 1..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        let word_ends = b.get(at + 1 + digits).is_none_or(|&c| !lex::is_ident(c));
        (!qualified && digits > 0 && word_ends)
            .then(|| format!("an issue (`{}`)", &line[at..=at + digits]))
    })
}

/// A note's stem before `.md` or a section sign; an upper-case stem
/// standing as a word of its own also cites the note.
fn outside_note(line: &str) -> Option<String> {
    for stem in OUTSIDE_NOTES {
        for (at, _) in line.match_indices(stem) {
            let before = line[..at].bytes().next_back();
            if before.is_some_and(|c| lex::is_ident(c) || c == b'/' || c == b'-') {
                continue;
            }
            let rest = &line[at + stem.len()..];
            let cites = rest.starts_with(".md")
                || rest.trim_start().starts_with('§')
                || (stem.bytes().all(|c| c.is_ascii_uppercase())
                    && !rest.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_'));
            if cites {
                return Some(format!(
                    "a note outside the repository (`{}`)",
                    words(&line[at..], 2)
                ));
            }
        }
    }
    None
}

/// The first `n` words of `text`, without trailing punctuation.
fn words(text: &str, n: usize) -> String {
    let taken: Vec<&str> = text.split_whitespace().take(n).collect();
    taken
        .join(" ")
        .trim_end_matches([',', '.', ')', ';', ':'])
        .to_owned()
}

fn collect_markdown(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    for path in paths {
        if path.is_dir() {
            collect_markdown(&path, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn citations_are_found_and_plain_words_are_not() {
        let issue = concat!("iss", "ue");
        let cases = [
            (format!("// as {issue} 17, item 5, asks"), true),
            (
                format!("//! {}s 30–33 measured it", issue.to_uppercase()),
                true,
            ),
            (format!("see {issue} #4"), true),
            (format!("// the {issue}'s probe"), true),
            ("fixed in #12.".to_owned(), true),
            (format!("// {} §2's table", OUTSIDE_NOTES[0]), true),
            (format!("// {}'s decision table", OUTSIDE_NOTES[0]), true),
            (format!("/// ({} §3.4)", OUTSIDE_NOTES[2]), true),
            (format!("({}.md §1.3)", OUTSIDE_NOTES[3]), true),
            (format!("in {OUTSIDE_FOLDER}/x"), true),
            (
                format!("// an {issue} of the certificate, an {issue}r"),
                false,
            ),
            (
                "// groq/groq-typescript#28 and vercel/ai#5171".to_owned(),
                false,
            ),
            (
                "// `#[derive(Debug)]`, a colour #fff, &#39;".to_owned(),
                false,
            ),
            (
                "// the routing table, docs/configuration.md".to_owned(),
                false,
            ),
            (
                "// wire formats and clouds, production code".to_owned(),
                false,
            ),
        ];
        for (line, found) in cases {
            assert_eq!(cited(&line).is_some(), found, "{line} → {:?}", cited(&line));
        }
    }

    #[test]
    fn a_citation_wrapped_across_lines_is_found() {
        let issue = concat!("iss", "ue");
        let first = format!("//! Bedrock, {issue}");
        let lines = [
            (1, first.as_str()),
            (2, "//! 31, asked for it."),
            (4, "//! 7 apart"),
        ];
        let found = cited_lines(&lines);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0, 1);
        let plain = [(1, "//! an ordinary"), (2, "//! 31 words")];
        assert!(cited_lines(&plain).is_empty());
    }

    #[test]
    fn a_planted_citation_and_a_long_map_are_reported() {
        let root = std::env::temp_dir().join(format!("xtask-citations-{}", std::process::id()));
        let _ = std::fs::create_dir_all(root.join("docs/deep"));
        let _ = std::fs::create_dir_all(root.join("src"));
        let cite = format!("see {}.md §2", OUTSIDE_NOTES[3]);
        let _ = std::fs::write(root.join("docs/deep/x.md"), format!("A line.\n{cite}\n"));
        let _ = std::fs::write(root.join("docs/clean.md"), "Nothing cited.\n");
        let code = format!("//! A file.\nfn f() -> &'static str {{ \"{cite}\" }} // {cite}\n");
        let _ = std::fs::write(root.join("src/a.rs"), code);
        let found = problems(&root, &[root.join("src/a.rs")]);
        let short = map_length(&root);
        let _ = std::fs::write(root.join(MAP), "a line\n".repeat(MAP_MAX + 1));
        let long = map_length(&root);
        let _ = std::fs::remove_dir_all(&root);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].starts_with("docs/deep/x.md:2: cites a note outside"));
        assert!(found[1].starts_with("src/a.rs:2: cites a note outside"));
        assert_eq!(short, None);
        assert!(long.is_some_and(|l| l.starts_with("docs/architecture.md: 301 lines")));
    }
}
