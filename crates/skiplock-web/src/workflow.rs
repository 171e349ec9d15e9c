//! A job's workflow on its page (migration 13): the jobs it waits for and the jobs that wait
//! for it, listed with their states, and the graph of the jobs connected to it, drawn as
//! inline SVG on the server (no script, no external asset).
//!
//! The graph is laid out in layers by depth: a job sits one layer below the deepest job it
//! waits for (longest-path layering), so parents are always above their children. An edge
//! that spans several layers passes through a placeholder in each layer between, so that it
//! goes around the jobs there instead of through them. The order within a layer comes from a
//! few barycenter sweeps (each job near the mean position of its neighbours, which keeps edges
//! from crossing), the positions from a few passes that pull each job toward its neighbours
//! without overlapping; a layer wider than the page wraps onto several rows.

use std::collections::HashMap;
use std::fmt::Write as _;

use tokio_postgres::{GenericClient, Row};

use crate::db::{DbResult, Sql};
use crate::html::{esc, int, state_badge, Count, Frame};

/// The most parents, and the most children, listed on a job's page.
pub(crate) const MAX_RELATIVES: i64 = 200;
/// The most jobs in a job's graph.
pub(crate) const MAX_NODES: i64 = 300;
/// The most edges drawn (a graph of [`MAX_NODES`] jobs could have tens of thousands).
const MAX_EDGES: usize = 3_000;
/// The most placeholders for edges that span layers; past them, edges go straight.
const MAX_DUMMIES: usize = 3_000;

/// A job's parents and children, and its graph.
#[derive(Debug)]
pub(crate) struct Workflow {
    pub(crate) parents: Vec<Relative>,
    pub(crate) children: Vec<Relative>,
    /// How many jobs wait for it (counted up to the count limit).
    pub(crate) children_total: Count,
    /// How many of those still wait for it (it is not done).
    pub(crate) children_waiting: i64,
    pub(crate) graph: Graph,
}

/// A parent or a child in the lists.
#[derive(Debug)]
pub(crate) struct Relative {
    pub(crate) id: i64,
    /// The job's `status` (`None`: deleted since).
    pub(crate) status: Option<String>,
    pub(crate) kind: Option<String>,
    pub(crate) queue: Option<String>,
    pub(crate) held: Option<String>,
    pub(crate) cancelled: bool,
}

/// The jobs of a workflow around one job, with the edges between them.
#[derive(Debug, Default)]
pub(crate) struct Graph {
    pub(crate) nodes: Vec<Node>,
    /// How many jobs the walk reached (at most the count limit).
    pub(crate) total: i64,
    /// Whether the walk stopped counting at the count limit.
    pub(crate) total_capped: bool,
}

/// One job of the graph.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub(crate) id: i64,
    /// Its state class: see [`state_class`].
    pub(crate) state: &'static str,
    pub(crate) kind: Option<String>,
    pub(crate) queue: Option<String>,
    /// The jobs it waits for that are in the graph.
    pub(crate) parents: Vec<i64>,
}

/// Whether a job's page shows a workflow: it waits for jobs, or jobs wait for it.
pub(crate) fn takes_part(job: &Row) -> bool {
    job.get::<_, i64>("parents_total") > 0 || job.get::<_, bool>("has_children")
}

/// Reads job `id`'s family and graph, in the page's transaction.
pub(crate) async fn read(
    c: &(impl GenericClient + Sync),
    sql: &Sql,
    id: i64,
    count_limit: i64,
) -> DbResult<Workflow> {
    let mut parents = Vec::new();
    let mut children = Vec::new();
    for r in sql.job_family(c, id, MAX_RELATIVES).await? {
        let rel = Relative {
            id: r.get("id"),
            status: r.get("status"),
            kind: r.get("kind"),
            queue: r.get("queue"),
            held: r.get("held"),
            cancelled: r.get::<_, Option<bool>>("cancelled").unwrap_or(false),
        };
        if r.get::<_, &str>("rel") == "parent" {
            parents.push(rel);
        } else {
            children.push(rel);
        }
    }
    let (total, waiting) = sql.job_children_count(c, id, count_limit).await?;
    let children_total = if total >= count_limit {
        Count::AtLeast(total)
    } else {
        Count::Exact(total)
    };
    let rows = sql.job_workflow(c, id, MAX_NODES, count_limit).await?;
    let mut graph = Graph::default();
    for r in &rows {
        graph.total = r.get("total");
        let status: Option<String> = r.get("status");
        let held: Option<String> = r.get("held");
        let cancelled = r.get::<_, Option<bool>>("cancelled").unwrap_or(false);
        graph.nodes.push(Node {
            id: r.get("id"),
            state: state_class(status.as_deref(), held.as_deref(), cancelled),
            kind: r.get("kind"),
            queue: r.get("queue"),
            parents: r.get("parents"),
        });
    }
    graph.total_capped = graph.total >= count_limit;
    Ok(Workflow {
        parents,
        children,
        children_total,
        children_waiting: waiting,
        graph,
    })
}

/// The state a workflow shows for a job: its status, with a queued job that waits for its
/// parents (`held = 'after'`) as `waiting`, a cancelled failure as `cancelled`, and a job
/// deleted since as `deleted`.
pub(crate) fn state_class(
    status: Option<&str>,
    held: Option<&str>,
    cancelled: bool,
) -> &'static str {
    match status {
        None => "deleted",
        Some("queued") if held == Some("after") => "waiting",
        Some("queued") => "queued",
        Some("running") => "running",
        Some("done") => "done",
        Some("failed") if cancelled => "cancelled",
        Some("failed") => "failed",
        Some(_) => "other",
    }
}

/// The badge of a workflow state (the dashboard's state badges, and two more).
fn badge(state: &str) -> String {
    match state {
        "waiting" => "<span class=\"state state-waiting\" title=\"Queued, waiting for the jobs it \
                      depends on: it becomes ready when they are all done\">waiting</span>"
            .to_owned(),
        "cancelled" => "<span class=\"state state-cancelled\" title=\"Failed: cancelled\">\
                        cancelled</span>"
            .to_owned(),
        "deleted" => "<span class=\"state state-deleted\" title=\"Deleted (or pruned) since\">\
                      deleted</span>"
            .to_owned(),
        s => state_badge(s),
    }
}

/// The workflow section of job `id`'s page. `parents_total` and `parents_waiting` come from
/// the job's row (its `after` and `waiting`); `status` is the job's own.
pub(crate) fn section(
    f: &Frame<'_>,
    id: i64,
    status: &str,
    parents_total: i64,
    parents_waiting: Option<i32>,
    w: &Workflow,
) -> String {
    let base = esc(f.base);
    let plural = |n: i64, one: &str, many: &str| {
        if n == 1 {
            one.to_owned()
        } else {
            many.to_owned()
        }
    };
    let mut s = String::from("<section class=\"workflow\"><h2>Workflow</h2><p class=\"summary\">");
    if parents_total > 0 {
        let open = i64::from(parents_waiting.unwrap_or(0).max(0));
        let _ = write!(
            s,
            "Waits for {} {}",
            int(parents_total),
            plural(parents_total, "job", "jobs")
        );
        if status == "queued" && open > 0 {
            let _ = write!(s, ": {} not done yet.", int(open));
        } else if open == 0 {
            s.push_str(", all done.");
        } else {
            s.push('.');
        }
        s.push(' ');
    }
    let n = w.children_total.value();
    if n > 0 {
        let who = format!("{} {}", w.children_total.html(), plural(n, "job", "jobs"));
        if w.children_waiting == 0 {
            let _ = write!(s, "{who} waited for it (released when it was done).");
        } else if w.children_waiting < n {
            let _ = write!(
                s,
                "{who} {} for it; {} of them still waiting.",
                plural(n, "waits", "wait"),
                int(w.children_waiting)
            );
        } else {
            let _ = write!(s, "{who} {} for it.", plural(n, "waits", "wait"));
        }
    } else if parents_total == 0 {
        s.push_str("No job waits for it any more.");
    }
    s.push_str("</p>");

    if w.graph.nodes.len() > 1 {
        s.push_str(&graph_html(f, id, &w.graph));
    }

    s.push_str("<div class=\"cols relatives\">");
    if parents_total > 0 {
        s.push_str(&relatives_table(
            &base,
            "Waits for",
            "parents",
            &w.parents,
            Count::Exact(parents_total),
        ));
    }
    if n > 0 {
        s.push_str(&relatives_table(
            &base,
            "Waited for by",
            "children",
            &w.children,
            w.children_total,
        ));
    }
    s.push_str("</div></section>");
    s
}

/// A list of parents or children: id, state, kind, queue; "and N more" past those listed.
fn relatives_table(
    base: &str,
    title: &str,
    class: &str,
    rows: &[Relative],
    total: Count,
) -> String {
    let mut s = format!(
        "<div class=\"relatives-list\"><h3>{title}</h3><table class=\"grid {class}\"><thead><tr>\
         <th>ID</th><th>State</th><th>Kind</th><th>Queue</th></tr></thead><tbody>"
    );
    for r in rows {
        let state = state_class(r.status.as_deref(), r.held.as_deref(), r.cancelled);
        let dash = "<span class=\"muted\">-</span>";
        let _ = write!(
            s,
            "<tr><td><a href=\"{base}/jobs/{id}\">{id}</a></td><td>{}</td><td>{}</td><td>{}</td></tr>",
            badge(state),
            r.kind.as_deref().map_or_else(|| dash.to_owned(), esc),
            r.queue.as_deref().map_or_else(|| dash.to_owned(), esc),
            id = r.id,
        );
    }
    s.push_str("</tbody></table>");
    let more = total.value() - rows.len() as i64;
    if more > 0 {
        let more = match total {
            Count::AtLeast(_) => format!("{}+", int(more)),
            _ => int(more),
        };
        let _ = write!(s, "<p class=\"note more\">and {more} more</p>");
    }
    s.push_str("</div>");
    s
}

// ---- The graph ---------------------------------------------------------------------------

const NODE_W: f64 = 148.0;
const NODE_H: f64 = 44.0;
/// The width a placeholder takes in its layer.
const DUMMY_W: f64 = 12.0;
const H_GAP: f64 = 22.0;
const LAYER_GAP: f64 = 56.0;
/// Between the rows of a layer that wraps.
const ROW_GAP: f64 = 30.0;
const MARGIN: f64 = 14.0;
/// The widest a row gets before its layer wraps.
const MAX_ROW: f64 = 1_180.0;
/// Characters of a kind that fit in a box.
const KIND_CHARS: usize = 19;

/// A job or a placeholder, in its layer.
#[derive(Debug, Clone, Copy)]
struct Item {
    /// The node, or `None` for a placeholder.
    node: Option<usize>,
    layer: usize,
    width: f64,
    /// Centre.
    x: f64,
    /// Top.
    y: f64,
}

/// Where everything goes.
#[derive(Debug)]
struct Layout {
    items: Vec<Item>,
    /// Per edge (parent node, child node): the items it passes through, parent first.
    chains: Vec<(usize, usize, Vec<usize>)>,
    width: f64,
    height: f64,
    /// Edges left out past [`MAX_EDGES`].
    edges_cut: usize,
}

/// Longest-path layers: 0 for a job none of whose parents is in the graph, else one more
/// than its deepest parent's. A cycle (impossible through the library, but a hand-written
/// UPDATE could make one) is broken at its lowest id.
fn layers(n: usize, edges: &[(usize, usize)]) -> Vec<usize> {
    let mut indeg = vec![0usize; n];
    let mut succ: Vec<Vec<usize>> = vec![Vec::new(); n];
    for &(p, c) in edges {
        indeg[c] += 1;
        succ[p].push(c);
    }
    let mut layer = vec![0usize; n];
    let mut done = vec![false; n];
    let mut ready: Vec<usize> = (0..n).filter(|&i| indeg[i] == 0).collect();
    ready.reverse();
    let mut left = n;
    while left > 0 {
        let next = match ready.pop() {
            Some(i) => i,
            // Only nodes on a cycle are left: take the first one as if it were ready.
            None => match (0..n).find(|&i| !done[i]) {
                Some(i) => i,
                None => break,
            },
        };
        if done[next] {
            continue;
        }
        done[next] = true;
        left -= 1;
        for &c in &succ[next] {
            if done[c] {
                continue;
            }
            layer[c] = layer[c].max(layer[next] + 1);
            indeg[c] = indeg[c].saturating_sub(1);
            if indeg[c] == 0 {
                ready.push(c);
            }
        }
    }
    layer
}

/// Places the nodes (in the order given, lowest id first) and routes the edges.
fn layout(nodes: &[Node]) -> Layout {
    let index: HashMap<i64, usize> = nodes.iter().enumerate().map(|(i, n)| (n.id, i)).collect();
    let mut edges: Vec<(usize, usize)> = Vec::new();
    let mut all = 0usize;
    for (c, n) in nodes.iter().enumerate() {
        for p in &n.parents {
            if let Some(&p) = index.get(p) {
                if p != c {
                    all += 1;
                    if edges.len() < MAX_EDGES {
                        edges.push((p, c));
                    }
                }
            }
        }
    }
    edges.sort_unstable();
    edges.dedup();
    let layer = layers(nodes.len(), &edges);

    let mut items: Vec<Item> = nodes
        .iter()
        .enumerate()
        .map(|(i, _)| Item {
            node: Some(i),
            layer: layer[i],
            width: NODE_W,
            x: 0.0,
            y: 0.0,
        })
        .collect();
    // Each edge as a chain of items, with a placeholder in each layer it crosses.
    let mut chains = Vec::with_capacity(edges.len());
    let mut dummies = 0usize;
    for &(p, c) in &edges {
        let mut chain = vec![p];
        let (lp, lc) = (layer[p], layer[c]);
        if lc > lp + 1 && dummies + (lc - lp - 1) <= MAX_DUMMIES {
            for l in lp + 1..lc {
                dummies += 1;
                items.push(Item {
                    node: None,
                    layer: l,
                    width: DUMMY_W,
                    x: 0.0,
                    y: 0.0,
                });
                chain.push(items.len() - 1);
            }
        }
        chain.push(c);
        chains.push((p, c, chain));
    }
    // Neighbours one layer up and one layer down.
    let mut up: Vec<Vec<usize>> = vec![Vec::new(); items.len()];
    let mut down: Vec<Vec<usize>> = vec![Vec::new(); items.len()];
    for (_, _, chain) in &chains {
        for w in chain.windows(2) {
            if items[w[1]].layer == items[w[0]].layer + 1 {
                up[w[1]].push(w[0]);
                down[w[0]].push(w[1]);
            }
        }
    }
    let depth = items.iter().map(|i| i.layer).max().map_or(0, |m| m + 1);
    let mut rows_of: Vec<Vec<usize>> = vec![Vec::new(); depth];
    for (i, it) in items.iter().enumerate() {
        rows_of[it.layer].push(i);
    }
    order(&mut rows_of, &up, &down);

    // Rows: a layer wider than MAX_ROW wraps.
    let mut rows: Vec<Vec<usize>> = Vec::new();
    let mut row_layer_start: Vec<bool> = Vec::new();
    for layer_items in &rows_of {
        let mut row: Vec<usize> = Vec::new();
        let mut w = 0.0;
        let mut first = true;
        for &i in layer_items {
            let add = if row.is_empty() {
                items[i].width
            } else {
                H_GAP + items[i].width
            };
            if !row.is_empty() && w + add > MAX_ROW {
                rows.push(std::mem::take(&mut row));
                row_layer_start.push(first);
                first = false;
                w = 0.0;
                row.push(i);
                w += items[i].width;
            } else {
                row.push(i);
                w += add;
            }
        }
        if !row.is_empty() {
            rows.push(row);
            row_layer_start.push(first);
        }
    }
    let row_width = |row: &[usize], items: &[Item]| -> f64 {
        row.iter().map(|&i| items[i].width).sum::<f64>()
            + H_GAP * row.len().saturating_sub(1) as f64
    };
    let inner = rows
        .iter()
        .map(|r| row_width(r, &items))
        .fold(NODE_W, f64::max);
    // Start centred, then pull each item toward its neighbours, down and up a few times.
    for row in &rows {
        let mut left = (inner - row_width(row, &items)) / 2.0;
        for &i in row {
            items[i].x = left + items[i].width / 2.0;
            left += items[i].width + H_GAP;
        }
    }
    for pass in 0..8 {
        let downward = pass % 2 == 0;
        let seq: Vec<&Vec<usize>> = if downward {
            rows.iter().collect()
        } else {
            rows.iter().rev().collect()
        };
        for row in seq {
            let wanted: Vec<f64> = row
                .iter()
                .map(|&i| {
                    let nb = if downward { &up[i] } else { &down[i] };
                    if nb.is_empty() {
                        items[i].x
                    } else {
                        nb.iter().map(|&j| items[j].x).sum::<f64>() / nb.len() as f64
                    }
                })
                .collect();
            place(row, &wanted, &mut items, inner);
        }
    }
    // No empty band at either side.
    let left = items
        .iter()
        .map(|i| i.x - i.width / 2.0)
        .fold(f64::INFINITY, f64::min);
    let right = items
        .iter()
        .map(|i| i.x + i.width / 2.0)
        .fold(f64::NEG_INFINITY, f64::max);
    let (shift, inner) = if left.is_finite() && right.is_finite() {
        (left, right - left)
    } else {
        (0.0, inner)
    };
    for it in &mut items {
        it.x -= shift;
    }
    // Heights: rows of one layer close together, layers further apart.
    let mut y = MARGIN;
    for (k, row) in rows.iter().enumerate() {
        if k > 0 {
            y += if row_layer_start[k] {
                LAYER_GAP
            } else {
                ROW_GAP
            };
        }
        for &i in row {
            items[i].y = y;
            items[i].x += MARGIN;
        }
        y += NODE_H;
    }
    Layout {
        items,
        chains,
        width: inner + 2.0 * MARGIN,
        height: y + MARGIN,
        edges_cut: all.saturating_sub(edges.len()),
    }
}

/// Orders each layer by barycenter sweeps: down by the mean position of the neighbours
/// above, up by those below, keeping the order of items without neighbours there.
fn order(layers: &mut [Vec<usize>], up: &[Vec<usize>], down: &[Vec<usize>]) {
    let n = up.len();
    let mut pos = vec![0.0f64; n];
    let index = |layers: &[Vec<usize>], pos: &mut Vec<f64>| {
        for l in layers {
            for (k, &i) in l.iter().enumerate() {
                pos[i] = k as f64;
            }
        }
    };
    index(layers, &mut pos);
    for pass in 0..6 {
        let downward = pass % 2 == 0;
        let range: Vec<usize> = if downward {
            (1..layers.len()).collect()
        } else {
            (0..layers.len().saturating_sub(1)).rev().collect()
        };
        for l in range {
            let keyed: Vec<(f64, usize)> = layers[l]
                .iter()
                .map(|&i| {
                    let nb = if downward { &up[i] } else { &down[i] };
                    let key = if nb.is_empty() {
                        pos[i]
                    } else {
                        nb.iter().map(|&j| pos[j]).sum::<f64>() / nb.len() as f64
                    };
                    (key, i)
                })
                .collect();
            let mut keyed = keyed;
            keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(pos[a.1].total_cmp(&pos[b.1])));
            layers[l] = keyed.into_iter().map(|(_, i)| i).collect();
            for (k, &i) in layers[l].iter().enumerate() {
                pos[i] = k as f64;
            }
        }
    }
}

/// Puts the items of a row, in their order, as near their wanted centres as they can be
/// without overlapping, within `0..width`: the least squares placement, found as an isotonic
/// regression (pool adjacent violators) of the wanted centres less each item's least offset
/// from the first.
fn place(row: &[usize], wanted: &[f64], items: &mut [Item], width: f64) {
    let (Some(&first), Some(&last)) = (row.first(), row.last()) else {
        return;
    };
    let mut off = vec![0.0f64; row.len()];
    for k in 1..row.len() {
        off[k] = off[k - 1] + items[row[k - 1]].width / 2.0 + H_GAP + items[row[k]].width / 2.0;
    }
    let lo = items[first].width / 2.0;
    let hi = (width - items[last].width / 2.0 - off[row.len() - 1]).max(lo);
    // Blocks of items that sit edge to edge: (sum of their targets, how many).
    let mut blocks: Vec<(f64, usize)> = Vec::with_capacity(row.len());
    for k in 0..row.len() {
        blocks.push((wanted[k] - off[k], 1));
        while blocks.len() >= 2 {
            let (s2, c2) = blocks[blocks.len() - 1];
            let (s1, c1) = blocks[blocks.len() - 2];
            if s1 / c1 as f64 > s2 / c2 as f64 {
                blocks.pop();
                if let Some(b) = blocks.last_mut() {
                    *b = (s1 + s2, c1 + c2);
                }
            } else {
                break;
            }
        }
    }
    let mut k = 0;
    for (sum, count) in blocks {
        let z = (sum / count as f64).clamp(lo, hi);
        for _ in 0..count {
            items[row[k]].x = z + off[k];
            k += 1;
        }
    }
}

/// A number for an SVG attribute.
fn px(v: f64) -> String {
    let r = (v * 10.0).round() / 10.0;
    if r.fract() == 0.0 {
        format!("{r:.0}")
    } else {
        format!("{r:.1}")
    }
}

/// Text cut to `n` characters, with an ellipsis.
fn cut(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(n.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// The graph (an `<svg>`), its legend, and what was left out.
pub(crate) fn graph_html(f: &Frame<'_>, current: i64, g: &Graph) -> String {
    let base = esc(f.base);
    let l = layout(&g.nodes);
    let (w, h) = (px(l.width), px(l.height));
    let mut s = String::new();
    let _ = write!(
        s,
        "<div class=\"wf-graph\"><svg class=\"wf\" xmlns=\"http://www.w3.org/2000/svg\" \
         width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" role=\"img\" \
         aria-label=\"Workflow of job {current}: {} jobs, {} dependencies\">\
         <defs>\
         <marker id=\"wf-arrow\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"7\" \
         markerHeight=\"7\" orient=\"auto-start-reverse\"><path d=\"M0 1 L9 5 L0 9 z\" \
         class=\"wf-arrow\"/></marker>\
         <marker id=\"wf-arrow-near\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" \
         markerWidth=\"7\" markerHeight=\"7\" orient=\"auto-start-reverse\"><path \
         d=\"M0 1 L9 5 L0 9 z\" class=\"wf-arrow near\"/></marker>\
         </defs><g class=\"edges\">",
        g.nodes.len(),
        l.chains.len(),
    );
    for (p, c, chain) in &l.chains {
        let parent = &g.nodes[*p];
        let child = &g.nodes[*c];
        let mut d = String::new();
        let mut at: Option<(f64, f64)> = None;
        for (k, &i) in chain.iter().enumerate() {
            let it = &l.items[i];
            // Where the edge enters this item, and where it leaves it.
            let (top, bottom) = if k == 0 {
                (it.y + NODE_H, it.y + NODE_H)
            } else if k + 1 == chain.len() {
                (it.y - 1.5, it.y - 1.5)
            } else {
                (it.y, it.y + NODE_H)
            };
            match at {
                None => {
                    let _ = write!(d, "M{} {}", px(it.x), px(top));
                }
                Some((x0, y0)) => {
                    let mid = (y0 + top) / 2.0;
                    let _ = write!(
                        d,
                        " C{} {} {} {} {} {}",
                        px(x0),
                        px(mid),
                        px(it.x),
                        px(mid),
                        px(it.x),
                        px(top)
                    );
                    if bottom != top {
                        let _ = write!(d, " L{} {}", px(it.x), px(bottom));
                    }
                }
            }
            at = Some((it.x, bottom));
        }
        let near = parent.id == current || child.id == current;
        let open = parent.state != "done";
        let _ = write!(
            s,
            "<path class=\"edge{}{}\" d=\"{d}\" marker-end=\"url(#wf-arrow{})\" \
             data-from=\"{}\" data-to=\"{}\"/>",
            if open { " open" } else { "" },
            if near { " near" } else { "" },
            if near { "-near" } else { "" },
            parent.id,
            child.id,
        );
    }
    s.push_str("</g><g class=\"nodes\">");
    for it in &l.items {
        let Some(i) = it.node else { continue };
        let n = &g.nodes[i];
        let (x, y) = (it.x - NODE_W / 2.0, it.y);
        let current_class = if n.id == current { " current" } else { "" };
        let kind = n.kind.as_deref().unwrap_or("deleted");
        let title = match &n.queue {
            Some(q) => format!("Job {}: {kind}, {}, queue {q}", n.id, n.state),
            None => format!("Job {}: deleted", n.id),
        };
        let label = format!("#{}", n.id);
        // The state beside the id when both fit (an id of up to 9 digits).
        let state = if label.len() + n.state.len() <= 20 {
            format!(
                "<text class=\"st\" x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>",
                px(x + NODE_W - 10.0),
                px(y + 18.0),
                n.state
            )
        } else {
            String::new()
        };
        let _ = write!(
            s,
            "<a class=\"node state-{st}{current_class}\" href=\"{base}/jobs/{id}\" \
             data-id=\"{id}\"><title>{title}</title>",
            st = n.state,
            id = n.id,
            title = esc(&title),
        );
        if n.id == current {
            let _ = write!(
                s,
                "<rect class=\"halo\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"9\"/>",
                px(x - 4.0),
                px(y - 4.0),
                px(NODE_W + 8.0),
                px(NODE_H + 8.0)
            );
        }
        let _ = write!(
            s,
            "<rect class=\"box\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"6\"/>\
             <text class=\"id\" x=\"{}\" y=\"{}\">{}</text>{state}\
             <text class=\"kind\" x=\"{}\" y=\"{}\">{}</text></a>",
            px(x),
            px(y),
            px(NODE_W),
            px(NODE_H),
            px(x + 10.0),
            px(y + 18.0),
            esc(&label),
            px(x + 10.0),
            px(y + 35.0),
            esc(&cut(kind, KIND_CHARS)),
        );
    }
    s.push_str("</g></svg></div>");

    // The legend: the states present, the current job, and open edges.
    let mut present: Vec<&str> = Vec::new();
    for st in [
        "queued",
        "waiting",
        "running",
        "done",
        "failed",
        "cancelled",
        "deleted",
        "other",
    ] {
        if g.nodes.iter().any(|n| n.state == st) {
            present.push(st);
        }
    }
    s.push_str("<p class=\"wf-legend\">");
    for st in present {
        s.push_str(&badge(st));
        s.push(' ');
    }
    s.push_str(
        "<span class=\"key current\">this job</span> \
         <span class=\"key open\">dashed: its parent is not done yet</span></p>",
    );
    let shown = g.nodes.len() as i64;
    if g.total > shown || g.total_capped {
        let total = if g.total_capped {
            format!("{}+", int(g.total))
        } else {
            int(g.total)
        };
        let _ = write!(
            s,
            "<p class=\"note\">Showing {} of {total} jobs in this workflow: those nearest to \
             this job.</p>",
            int(shown)
        );
    }
    if l.edges_cut > 0 {
        let _ = write!(
            s,
            "<p class=\"note\">{} of the dependencies between these jobs are not drawn.</p>",
            int(l.edges_cut as i64)
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: i64, parents: &[i64]) -> Node {
        Node {
            id,
            state: "queued",
            kind: Some("k".to_owned()),
            queue: Some("default".to_owned()),
            parents: parents.to_vec(),
        }
    }

    #[test]
    fn parents_sit_above_their_children() {
        // a -> b -> z, and a -> z directly: z two layers down, the edge a -> z around b.
        let nodes = [node(1, &[]), node(2, &[1]), node(3, &[1, 2])];
        let l = layout(&nodes);
        let y = |i: usize| l.items[i].y;
        assert!(y(0) < y(1) && y(1) < y(2));
        assert_eq!(l.chains.len(), 3);
        let long = l
            .chains
            .iter()
            .find(|(p, c, _)| (*p, *c) == (0, 2))
            .unwrap();
        assert_eq!(long.2.len(), 3, "one placeholder in the middle layer");
        let dummy = l.items[long.2[1]];
        assert!(dummy.node.is_none());
        assert_eq!(dummy.y, y(1));
        assert!(
            (dummy.x - l.items[1].x).abs() >= (NODE_W + DUMMY_W) / 2.0,
            "the placeholder is beside b, not on it"
        );
    }

    #[test]
    fn boxes_of_a_row_do_not_overlap_and_wide_layers_wrap() {
        let mut nodes = vec![node(1, &[])];
        for id in 2..=40 {
            nodes.push(node(id, &[1]));
        }
        let l = layout(&nodes);
        assert!(l.width <= MAX_ROW + 2.0 * MARGIN + 0.5, "{}", l.width);
        let mut boxes: Vec<(f64, f64)> = l.items.iter().map(|i| (i.y, i.x)).collect();
        boxes.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
        for w in boxes.windows(2) {
            if w[0].0 == w[1].0 {
                assert!(w[1].1 - w[0].1 >= NODE_W + H_GAP - 0.01, "{w:?}");
            }
        }
        let rows: std::collections::BTreeSet<i64> = l.items.iter().map(|i| i.y as i64).collect();
        assert!(rows.len() >= 6, "1 + 39 children in rows of 7: {rows:?}");
    }

    #[test]
    fn a_cycle_does_not_hang_the_layout() {
        let nodes = [node(1, &[3]), node(2, &[1]), node(3, &[2])];
        let l = layout(&nodes);
        assert_eq!(l.chains.len(), 3);
    }

    #[test]
    fn states() {
        assert_eq!(state_class(Some("queued"), Some("after"), false), "waiting");
        assert_eq!(state_class(Some("queued"), None, false), "queued");
        assert_eq!(state_class(Some("failed"), Some("after"), false), "failed");
        assert_eq!(state_class(Some("failed"), None, true), "cancelled");
        assert_eq!(state_class(None, None, false), "deleted");
    }
}
