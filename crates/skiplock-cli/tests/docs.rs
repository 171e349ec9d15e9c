//! The documentation against the code, both ways, with no database: every subcommand that
//! `skiplock --help` lists is documented, and every `skiplock <command>` the documentation
//! names exists; every metric the library has is in docs/METRICS.md, and every metric the
//! documentation names exists; the README stays short; every relative link leads to a file
//! (and, for an anchor, a heading) that exists. "The documentation" is README.md and every
//! `.md` file of docs/. Each checker is also run on doctored text, to show that it can fail.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};
use std::process::Command;

/// The README's length limit: it is read to the end, and the reference lives in docs/.
const README_MAX_LINES: usize = 350;

/// One markdown file: its path from the repository's root, and its text.
struct Doc {
    path: PathBuf,
    text: String,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// README.md and every `.md` file of docs/, in name order.
fn docs() -> Vec<Doc> {
    let root = root();
    let mut paths = vec![PathBuf::from("README.md")];
    let mut in_docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| Path::new("docs").join(p.file_name().unwrap()))
        .collect();
    in_docs.sort();
    paths.extend(in_docs);
    paths
        .into_iter()
        .map(|path| Doc {
            text: std::fs::read_to_string(root.join(&path)).unwrap(),
            path,
        })
        .collect()
}

fn doc(path: &str, text: &str) -> Doc {
    Doc {
        path: PathBuf::from(path),
        text: text.to_owned(),
    }
}

// ---- markdown ------------------------------------------------------------------------------

fn is_fence(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with("```") || t.starts_with("~~~")
}

/// The text outside fenced code blocks, one string per paragraph (so that an inline code span
/// never runs past a paragraph), and the fenced blocks' contents.
fn split_markdown(md: &str) -> (Vec<String>, Vec<String>) {
    let (mut prose, mut blocks) = (Vec::new(), Vec::new());
    let mut paragraph = String::new();
    let mut block: Option<String> = None;
    for line in md.lines() {
        match block.as_mut() {
            Some(b) if is_fence(line) => {
                blocks.push(std::mem::take(b));
                block = None;
            }
            Some(b) => {
                b.push_str(line);
                b.push('\n');
            }
            None if is_fence(line) => {
                prose.push(std::mem::take(&mut paragraph));
                block = Some(String::new());
            }
            None if line.trim().is_empty() => prose.push(std::mem::take(&mut paragraph)),
            None => {
                paragraph.push_str(line);
                paragraph.push('\n');
            }
        }
    }
    prose.push(paragraph);
    blocks.extend(block);
    prose.retain(|p| !p.is_empty());
    (prose, blocks)
}

/// Everything a reader sees as code: the inline code spans and the fenced blocks.
fn code_of(md: &str) -> Vec<String> {
    let (prose, mut code) = split_markdown(md);
    for p in prose {
        code.extend(
            p.split('`')
                .skip(1)
                .step_by(2)
                .filter(|s| !s.is_empty())
                .map(str::to_owned),
        );
    }
    code
}

/// The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a markdown file's headings (a repeated heading gets `-1`, `-2`, ...).
fn anchors(md: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    let mut in_block = false;
    for line in md.lines() {
        if is_fence(line) {
            in_block = !in_block;
            continue;
        }
        let level = line.chars().take_while(|&c| c == '#').count();
        if in_block || level == 0 || level > 6 || !line[level..].starts_with(' ') {
            continue;
        }
        let s = slug(&line[level..]);
        let n = seen.entry(s.clone()).or_insert(0);
        out.insert(if *n == 0 {
            s.clone()
        } else {
            format!("{s}-{n}")
        });
        *n += 1;
    }
    out
}

/// The targets of the inline links and images outside code blocks: `[text](target)`.
fn links(md: &str) -> Vec<String> {
    let (prose, _) = split_markdown(md);
    let mut out = Vec::new();
    for p in prose {
        let mut rest = p.as_str();
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            if let Some(end) = rest.find(')') {
                let target = rest[..end].split_whitespace().next().unwrap_or("");
                out.push(target.to_owned());
                rest = &rest[end..];
            }
        }
    }
    out
}

// ---- the checkers --------------------------------------------------------------------------

/// `skiplock <word> [<word>]` wherever `skiplock` stands as a word of its own followed by a
/// space and a lower-case word: the command, and the word after it if there is one.
fn commands_named(text: &str) -> Vec<(String, Option<String>)> {
    fn word(s: &str) -> Option<&str> {
        let end = s
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'))
            .unwrap_or(s.len());
        let w = &s[..end];
        let boundary = s[end..]
            .chars()
            .next()
            .is_none_or(|c| c.is_whitespace() || ",.;:)'\"`|".contains(c));
        (w.starts_with(|c: char| c.is_ascii_lowercase()) && boundary).then_some(w)
    }
    let mut out = Vec::new();
    for (i, _) in text.match_indices("skiplock ") {
        let standalone = text[..i]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_alphanumeric() || "_-.:".contains(c)));
        if !standalone {
            continue;
        }
        let after = &text[i + "skiplock ".len()..];
        let Some(first) = word(after) else { continue };
        let rest = after[first.len()..].trim_start_matches(' ');
        out.push((first.to_owned(), word(rest).map(str::to_owned)));
    }
    out
}

/// The subcommands a `--help` text lists under "Commands:" (without `help`).
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| l.trim() != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("  ") && !l[2..].starts_with(' '))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|&name| name != "help")
        .map(str::to_owned)
        .collect()
}

/// Check 1: the subcommands that no document names as `skiplock <sub>`.
fn undocumented_subcommands(subs: &[String], docs: &[Doc]) -> Vec<String> {
    let named: BTreeSet<String> = docs
        .iter()
        .flat_map(|d| commands_named(&d.text))
        .map(|(first, _)| first)
        .collect();
    subs.iter()
        .filter(|s| !named.contains(*s))
        .map(|s| format!("`skiplock {s}` is in `skiplock --help` but in no document"))
        .collect()
}

/// Check 2: the `skiplock <command> [<subcommand>]` that the documents show as code but that
/// do not exist. `help(args)` is the `--help` text of `skiplock args...`, or `None` when
/// that command does not exist.
fn unknown_commands(docs: &[Doc], mut help: impl FnMut(&[&str]) -> Option<String>) -> Vec<String> {
    let mut named: BTreeMap<(String, Option<String>), BTreeSet<String>> = BTreeMap::new();
    for d in docs {
        for code in code_of(&d.text) {
            for c in commands_named(&code) {
                named
                    .entry(c)
                    .or_default()
                    .insert(d.path.display().to_string());
            }
        }
    }
    let mut problems = Vec::new();
    let mut helps: BTreeMap<String, Option<String>> = BTreeMap::new();
    for ((first, second), files) in named {
        let files = files.into_iter().collect::<Vec<_>>().join(", ");
        let text = helps
            .entry(first.clone())
            .or_insert_with(|| help(&[&first]))
            .clone();
        let Some(text) = text else {
            problems.push(format!("`skiplock {first}` (in {files}) is no command"));
            continue;
        };
        // A command group: the word after it must be one of its subcommands.
        let subs = subcommands(&text);
        if let Some(second) = second.filter(|_| !subs.is_empty()) {
            if !subs.contains(&second) {
                problems.push(format!(
                    "`skiplock {first} {second}` (in {files}) is no command: `skiplock {first}` has {subs:?}"
                ));
            }
        }
    }
    problems
}

/// The metric names `crates/skiplock/src/metrics.rs` defines: its
/// `pub const NAME: &str = "skiplock_...";` lines.
fn library_metrics(source: &str) -> BTreeSet<String> {
    source
        .lines()
        .filter(|l| l.starts_with("pub const ") && l.contains(": &str = \"skiplock_"))
        .filter_map(|l| l.split('"').nth(1))
        .map(str::to_owned)
        .collect()
}

/// The `skiplock_...` names a text uses as metrics: not a path (`skiplock_web::...`) and not
/// one of `crate_names` (the workspace's crates, as Rust spells them).
fn metrics_named(text: &str, crate_names: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices("skiplock_") {
        if text[..i]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
        {
            continue;
        }
        let rest = &text[i..];
        let end = rest
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(rest.len());
        let name = &rest[..end];
        if rest[end..].starts_with("::") || crate_names.contains(name) {
            continue;
        }
        out.insert(name.to_owned());
    }
    out
}

/// Check 3: metrics named in the documents that the library lacks (a histogram's series
/// `_bucket`, `_sum` and `_count` count as their histogram), and metrics of the library
/// without a row in docs/METRICS.md.
fn metric_problems(
    library: &BTreeSet<String>,
    docs: &[Doc],
    metrics_md: &str,
    crate_names: &BTreeSet<String>,
) -> Vec<String> {
    let mut problems = Vec::new();
    for d in docs {
        for name in metrics_named(&d.text, crate_names) {
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .filter(|b| library.contains(*b));
            if !library.contains(&name) && base.is_none() {
                problems.push(format!(
                    "{} names `{name}`, which is no metric of the library",
                    d.path.display()
                ));
            }
        }
    }
    for name in library {
        if !metrics_md
            .lines()
            .any(|l| l.starts_with(&format!("| `{name}` |")))
        {
            problems.push(format!("`{name}` has no row in docs/METRICS.md"));
        }
    }
    problems
}

/// Check 4.
fn readme_too_long(readme: &str) -> Option<String> {
    let n = readme.lines().count();
    (n > README_MAX_LINES).then(|| format!("README.md has {n} lines, more than {README_MAX_LINES}"))
}

/// `base/rel`, with `.` and `..` resolved without touching the file system.
fn join(base: &Path, rel: &str) -> PathBuf {
    let mut out = PathBuf::new();
    for c in base.join(rel).components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// Check 5: relative links whose file does not exist, or whose anchor names no heading of
/// the markdown file it points into. `exists(path)` says whether a path (from the root)
/// exists; `read(path)` gives a markdown file's text.
fn broken_links(
    docs: &[Doc],
    exists: impl Fn(&Path) -> bool,
    read: impl Fn(&Path) -> Option<String>,
) -> (usize, Vec<String>) {
    let (mut checked, mut problems) = (0, Vec::new());
    for d in docs {
        let dir = d.path.parent().unwrap_or(Path::new(""));
        for target in links(&d.text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (file, anchor) = match target.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (target.as_str(), None),
            };
            let path = if file.is_empty() {
                d.path.clone()
            } else {
                join(dir, file)
            };
            let from = d.path.display();
            if !file.is_empty() && !exists(&path) {
                problems.push(format!("{from}: `{target}` leads to no file"));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if path.extension().is_some_and(|e| e == "md") {
                let text = if file.is_empty() {
                    Some(d.text.clone())
                } else {
                    read(&path)
                };
                if !text.is_some_and(|t| anchors(&t).contains(anchor)) {
                    problems.push(format!(
                        "{from}: `{target}`: {} has no heading `#{anchor}`",
                        path.display()
                    ));
                }
            }
        }
    }
    (checked, problems)
}

// ---- the real documents --------------------------------------------------------------------

fn help_of(args: &[&str]) -> Option<String> {
    let o = Command::new(assert_cmd::cargo::cargo_bin!("skiplock"))
        .env_remove("DATABASE_URL")
        .env_remove("SKIPLOCK_HOME")
        .args(args)
        .arg("--help")
        .output()
        .unwrap();
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).into_owned())
}

fn crate_names() -> BTreeSet<String> {
    std::fs::read_dir(root().join("crates"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().replace('-', "_"))
        .collect()
}

#[track_caller]
fn none(problems: Vec<String>) {
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

#[test]
fn every_subcommand_is_documented() {
    let subs = subcommands(&help_of(&[]).unwrap());
    assert!(subs.len() >= 15, "too few subcommands parsed: {subs:?}");
    assert!(subs.iter().any(|s| s == "work") && subs.iter().any(|s| s == "pg"));
    let docs = docs();
    none(undocumented_subcommands(&subs, &docs));

    // Negative control: a subcommand no document names, and a document set from which one
    // command's every mention was taken out.
    let mut with_new = subs.clone();
    with_new.push("frobnicate".into());
    assert_eq!(
        undocumented_subcommands(&with_new, &docs),
        ["`skiplock frobnicate` is in `skiplock --help` but in no document"]
    );
    let without_prune: Vec<Doc> = docs
        .iter()
        .map(|d| {
            doc(
                &d.path.to_string_lossy(),
                &d.text.replace("skiplock prune", ""),
            )
        })
        .collect();
    assert_eq!(
        undocumented_subcommands(&subs, &without_prune),
        ["`skiplock prune` is in `skiplock --help` but in no document"]
    );
}

#[test]
fn every_command_the_docs_name_exists() {
    let docs = docs();
    let mut asked = 0;
    let problems = unknown_commands(&docs, |args| {
        asked += 1;
        help_of(args)
    });
    none(problems);
    // Not vacuous: the documents name most commands.
    assert!(
        asked >= 15,
        "only {asked} commands named in the documents' code"
    );

    // Negative control: an unknown command in a code block, an unknown subcommand of a
    // command group in an inline code span, and prose, which is not code and not checked.
    let doctored = [doc(
        "docs/X.md",
        "Run `skiplock queue frobnicate mail` or `skiplock pg url`.\n\n\
         ```sh\nskiplock frobnicate --now\nskiplock work --drain\n```\n\n\
         skiplock promises a lot.\n",
    )];
    assert_eq!(
        unknown_commands(&doctored, help_of),
        [
            "`skiplock frobnicate` (in docs/X.md) is no command",
            "`skiplock queue frobnicate` (in docs/X.md) is no command: `skiplock queue` has \
             [\"list\", \"pause\", \"resume\", \"limit\"]",
        ]
    );
}

#[test]
fn every_metric_is_documented_and_every_documented_metric_exists() {
    let root = root();
    let library = library_metrics(
        &std::fs::read_to_string(root.join("crates/skiplock/src/metrics.rs")).unwrap(),
    );
    assert!(
        library.len() >= 30,
        "too few metric names parsed: {library:?}"
    );
    let docs = docs();
    let metrics_md = std::fs::read_to_string(root.join("docs/METRICS.md")).unwrap();
    let crates = crate_names();
    assert!(crates.contains("skiplock_testdb"), "{crates:?}");
    none(metric_problems(&library, &docs, &metrics_md, &crates));
    // Not vacuous: the documents name every metric, as metrics.
    let named: BTreeSet<String> = docs
        .iter()
        .flat_map(|d| metrics_named(&d.text, &crates))
        .collect();
    assert!(library.is_subset(&named));

    // Negative control: a name the library lacks (in a code block: still checked), a row
    // taken out of METRICS.md, and the paths and crate names that are not metrics.
    let doctored = [doc(
        "docs/X.md",
        "```yaml\nexpr: rate(skiplock_jobs_frobnicated_total[5m]) > 0\n```\n\
         `skiplock_job_run_seconds_bucket`, `skiplock_testdb::TestDb`, `skiplock_web`\n",
    )];
    let without_row: String = metrics_md
        .lines()
        .filter(|l| !l.starts_with("| `skiplock_jobs_held` |"))
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(
        metric_problems(&library, &doctored, &without_row, &crates),
        [
            "docs/X.md names `skiplock_jobs_frobnicated_total`, which is no metric of the library",
            "`skiplock_jobs_held` has no row in docs/METRICS.md",
        ]
    );
}

#[test]
fn the_readme_is_short() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    assert_eq!(readme_too_long(&readme), None);

    // Negative control: one line over.
    assert_eq!(readme_too_long(&"x\n".repeat(README_MAX_LINES)), None);
    assert_eq!(
        readme_too_long(&"x\n".repeat(README_MAX_LINES + 1)),
        Some(format!(
            "README.md has {} lines, more than {README_MAX_LINES}",
            README_MAX_LINES + 1
        ))
    );
}

#[test]
fn every_relative_link_leads_somewhere() {
    let root = root();
    let exists = |p: &Path| root.join(p).exists();
    let read = |p: &Path| std::fs::read_to_string(root.join(p)).ok();
    let docs = docs();
    let (checked, problems) = broken_links(&docs, exists, read);
    none(problems);
    // Not vacuous: the documents link to each other and into the code.
    assert!(checked >= 40, "only {checked} relative links found");

    // Negative control: a missing file, a missing heading in another file and in the same
    // one, against links that are good (a heading with punctuation, a folder, `..`), and a
    // link inside a code block, which is not a link.
    let doctored = [doc(
        "docs/X.md",
        "# Top\n\n## The `skiplock` command: here\n\n\
         [a](NOPE.md) [b](GUIDE.md#no-such-heading) [c](#nowhere) [d](#the-skiplock-command-here)\n\
         [e](OPERATIONS.md#tls) [f](../crates/skiplock/queries) [g](https://example.com/x)\n\n\
         ```rust\nlet x = [y](z);\n```\n",
    )];
    let (checked, problems) = broken_links(&doctored, exists, read);
    assert_eq!(checked, 6);
    assert_eq!(
        problems,
        [
            "docs/X.md: `NOPE.md` leads to no file",
            "docs/X.md: `GUIDE.md#no-such-heading`: docs/GUIDE.md has no heading `#no-such-heading`",
            "docs/X.md: `#nowhere`: docs/X.md has no heading `#nowhere`",
        ]
    );
}

#[test]
fn the_markdown_helpers_read_code_and_headings_as_github_does() {
    let md = "# A\n\nSee `skiplock work --drain` and\n`skiplock pg\nurl`.\n\n```sh\nskiplock stats # x\n```\n\n## A\n## Why not the naive query, and when not?\n";
    assert_eq!(
        code_of(md),
        [
            "skiplock stats # x\n",
            "skiplock work --drain",
            "skiplock pg\nurl"
        ]
    );
    assert_eq!(
        anchors(md),
        ["a", "a-1", "why-not-the-naive-query-and-when-not"]
            .into_iter()
            .map(String::from)
            .collect()
    );
    assert_eq!(
        commands_named("skiplock queue pause q; target/debug/skiplock pg url; skiplock.enqueue; skiplock-cli demo; skiplock --schema s; ON SCHEMA skiplock TO x"),
        [
            ("queue".to_owned(), Some("pause".to_owned())),
            ("pg".to_owned(), Some("url".to_owned())),
        ]
    );
}
