//! The documentation stays whole: every internal link of README.md and
//! docs/*.md reaches a file and a heading that exist, and every SQL function
//! of the extension is described somewhere in docs/.
//!
//! Markdown is parsed with pulldown-cmark (CommonMark plus tables), so links
//! inside code blocks and inline code are not links, reference-style links
//! are resolved, and heading text is what GitHub renders.

use super::support::*;
use pulldown_cmark::{Event, LinkType, Options, Parser, Tag, TagEnd};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// docs/*.md, sorted.
fn docs_pages() -> Vec<PathBuf> {
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("read docs/")
        .map(|entry| entry.expect("docs/ entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    pages.sort();
    assert!(!pages.is_empty(), "docs/ has no .md page");
    pages
}

/// The files whose links are checked: README.md, every docs page, and the
/// Python client's README (it links back into the top-level README).
fn linking_files() -> Vec<PathBuf> {
    let mut files = vec![root().join("README.md"), root().join("clients/python/README.md")];
    files.extend(docs_pages());
    files
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

fn parser(text: &str) -> Parser<'_> {
    Parser::new_ext(text, Options::ENABLE_TABLES)
}

/// GitHub's anchor for a heading: lowercase, every character but
/// alphanumerics, spaces, hyphens and underscores dropped, each space a
/// hyphen.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a markdown file's headings; a repeated slug gets -1, -2, ...
fn anchors(text: &str) -> BTreeSet<String> {
    let mut anchors = BTreeSet::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut heading: Option<String> = None;
    for event in parser(text) {
        match event {
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::End(TagEnd::Heading(_)) => {
                let base = slug(&heading.take().expect("heading text"));
                let n = seen.entry(base.clone()).or_insert(0);
                anchors.insert(if *n == 0 { base.clone() } else { format!("{base}-{n}") });
                *n += 1;
            }
            Event::Text(t) | Event::Code(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
            }
            Event::SoftBreak | Event::HardBreak => {
                if let Some(h) = heading.as_mut() {
                    h.push(' ');
                }
            }
            _ => {}
        }
    }
    anchors
}

/// (line, target) of every link and image of a markdown file.
fn links(text: &str) -> Vec<(usize, String)> {
    parser(text)
        .into_offset_iter()
        .filter_map(|(event, range)| match event {
            Event::Start(Tag::Link { link_type, dest_url, .. }) if link_type != LinkType::Email => {
                Some((range.start, dest_url.to_string()))
            }
            Event::Start(Tag::Image { dest_url, .. }) => Some((range.start, dest_url.to_string())),
            _ => None,
        })
        .map(|(offset, target)| (text[..offset].matches('\n').count() + 1, target))
        .collect()
}

fn is_external(target: &str) -> bool {
    let lower = target.to_ascii_lowercase();
    ["http://", "https://", "mailto:"].iter().any(|scheme| lower.starts_with(scheme))
}

/// Why `target`, linked from `from`, does not resolve; None when it does.
fn broken(from: &Path, target: &str, anchor_cache: &mut HashMap<PathBuf, BTreeSet<String>>) -> Option<String> {
    let (file, anchor) = match target.split_once('#') {
        Some((file, anchor)) => (file, Some(anchor)),
        None => (target, None),
    };
    let path =
        if file.is_empty() { from.to_path_buf() } else { from.parent().expect("a file has a parent").join(file) };
    if !path.exists() {
        return Some(format!("{} does not exist", path.display()));
    }
    let anchor = anchor?;
    if path.extension().is_none_or(|ext| ext != "md") {
        return Some(format!("#{anchor} points into {}, which is not markdown", path.display()));
    }
    let known = anchor_cache.entry(path.clone()).or_insert_with(|| anchors(&read(&path)));
    (!known.contains(anchor)).then(|| format!("{} has no heading with anchor #{anchor}", path.display()))
}

#[test]
fn every_internal_link_and_anchor_resolves() {
    let root = root();
    let mut cache = HashMap::new();
    let mut failures = Vec::new();
    let mut checked = 0;
    for file in linking_files() {
        for (line, target) in links(&read(&file)) {
            if is_external(&target) {
                continue;
            }
            checked += 1;
            if let Some(why) = broken(&file, &target, &mut cache) {
                let shown = file.strip_prefix(&root).unwrap_or(&file).display().to_string();
                failures.push(format!("{shown}:{line}: ({target}): {why}"));
            }
        }
    }
    assert!(checked > 30, "only {checked} internal links found: is the parser reading the files?");
    assert!(failures.is_empty(), "{} broken internal links:\n{}", failures.len(), failures.join("\n"));
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The rule for "documented": somewhere in docs/*.md (prose, tables or code)
/// the name is written `distlock.NAME` (not followed by an identifier
/// character) or `NAME(` (not preceded by one), so `lock` is not found in
/// `unlock(` or `distlock.lock_id`.
fn mentions(text: &str, name: &str) -> bool {
    text.match_indices(name).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + name.len()..].chars().next();
        let qualified = text[..at].ends_with("distlock.") && !after.is_some_and(is_ident);
        let called = !before.is_some_and(is_ident) && after == Some('(');
        qualified || called
    })
}

#[test]
fn every_sql_function_is_documented() {
    let docs: String = docs_pages().iter().map(|page| read(page)).collect::<Vec<_>>().join("\n");
    let db = fresh_db("docs_functions");
    let mut client = connect(&db);
    let names: Vec<String> = client
        .query(
            "SELECT DISTINCT p.proname::text FROM pg_proc p
               JOIN pg_depend d ON d.objid = p.oid AND d.classid = 'pg_proc'::regclass AND d.deptype = 'e'
               JOIN pg_extension e ON e.oid = d.refobjid
              WHERE e.extname = 'pg_distlock' ORDER BY 1",
            &[],
        )
        .expect("list the extension's functions")
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert!(names.len() > 40, "only {} functions found in the extension: {names:?}", names.len());
    let missing: Vec<&String> = names.iter().filter(|name| !mentions(&docs, name)).collect();
    assert!(
        missing.is_empty(),
        "{} of {} functions of pg_distlock are not documented in docs/*.md \
         (write them as `distlock.NAME` or `NAME(`): {missing:?}",
        missing.len(),
        names.len()
    );
}

#[test]
fn slugs_and_mentions_follow_their_rules() {
    assert_eq!(slug("Failover, tested"), "failover-tested");
    assert_eq!(slug("Cutting a release (say 0.4.0)"), "cutting-a-release-say-040");
    assert_eq!(slug("Running the sweep from pg_cron"), "running-the-sweep-from-pg_cron");
    let dup = anchors("# A\n\n## A\n\n```\n# not a heading\n```\n\n### `lock(key)` calls\n");
    assert_eq!(dup, ["a", "a-1", "lockkey-calls"].map(String::from).into_iter().collect());
    assert!(mentions("see `distlock.lock`.", "lock"));
    assert!(mentions("`lock(p_key text)`", "lock"));
    assert!(!mentions("`unlock(k)` and `distlock.lock_id(k)`", "lock"));
    let found = links("[a](b.md#c) `[x](y.md)`\n\n```\n[p](q.md)\n```\n\n![i](img.png) <https://e.org>\n");
    assert_eq!(found, vec![(1, "b.md#c".to_string()), (7, "img.png".to_string()), (7, "https://e.org".to_string())]);
}
