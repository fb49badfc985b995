"""One Topology pane: the SVG Graphviz drew (xc_core/views/topology.py) in a scrollable, zoomable box, reporting clicks
back to Python. A Streamlit v2 component with inline JS: clicking a node selects it (`select` = the node's box id),
clicking a collapsed group or an expanded group's title toggles it (`toggle` = the group path). Highlights
(selected, no counterpart, search matches) are CSS classes set from `data`, so changing them never re-lays out.

Synced panes (the Compare page): panes given the same `data.sync` name scroll and zoom together, in the browser
(a round trip to Python per scroll step would lag). `data.counterparts` maps a box of this pane to the box of the
other pane that shows the same model op ("b3" -> "b5"): scrolling keeps the counterpart of the box nearest the
middle of the moved pane level with it in the other, so an insertion on one side does not shear the two apart;
where no box has a counterpart, the panes keep the same scroll fraction."""
import streamlit as st

from xc_core.views.model_compare import COMPARE_CSS
from xc_core.views.topology import MARK_CSS

_CSS = """
.xc-pane { border: 1px solid #d0d7de; border-radius: 6px; background: #fff; }
.xc-bar { display: flex; gap: 4px; padding: 4px 6px; border-bottom: 1px solid #eaeef2; font: 12px sans-serif;
          align-items: center; color: #555; }
.xc-bar button { border: 1px solid #d0d7de; background: #f6f8fa; border-radius: 4px; padding: 1px 8px;
                 cursor: pointer; font: 12px sans-serif; }
.xc-canvas { overflow: auto; height: var(--xc-height, 640px); }
.xc-canvas svg { display: block; }
g.node { cursor: pointer; }
g.node:hover > path, g.node:hover > polygon { stroke-width: 2.4; }
g.cluster > text { cursor: pointer; }
"""

_JS = """
export default function(component) {
  const { data, parentElement, setTriggerValue } = component;
  let pane = parentElement.querySelector('.xc-pane');
  if (!pane) {
    pane = document.createElement('div');
    pane.className = 'xc-pane';
    pane.innerHTML = '<div class="xc-bar"><button data-z="-">−</button><button data-z="+">+</button>' +
                     '<button data-z="fit">fit</button><button data-z="1">100%</button>' +
                     '<span class="xc-info"></span></div><div class="xc-canvas"></div>';
    parentElement.appendChild(pane);
    pane.querySelectorAll('button').forEach((btn) => {
      btn.onclick = () => {
        const z = btn.getAttribute('data-z');
        const cur = parseFloat(pane.dataset.scale || '1');
        pane.dataset.scale = String(z === '+' ? cur * 1.25 : z === '-' ? cur / 1.25 : z === '1' ? 1 : fit(pane));
        applyScale(pane);
        for (const peer of peers(pane)) {
          peer.dataset.scale = pane.dataset.scale;
          applyScale(peer);
        }
        syncScroll(pane);
      };
    });
    pane.querySelector('.xc-canvas').addEventListener('scroll', () => {
      // A scroll this pane made to follow a peer is not passed back (the two would chase each other).
      if (performance.now() < (pane._xcQuietUntil || 0) || pane._xcFrame) return;
      pane._xcFrame = requestAnimationFrame(() => { pane._xcFrame = 0; syncScroll(pane); });
    }, { passive: true });
  }
  pane._xcData = data;
  joinSyncGroup(pane);
  const canvas = pane.querySelector('.xc-canvas');
  canvas.style.setProperty('--xc-height', (data.height || 640) + 'px');
  if (pane.dataset.key !== data.key) {
    canvas.innerHTML = data.svg;
    pane.dataset.key = data.key;
    const svg = canvas.querySelector('svg');
    if (svg) {
      svg.dataset.w = String(svg.width.baseVal.value);
      svg.dataset.h = String(svg.height.baseVal.value);
    }
    canvas.querySelectorAll('g.node').forEach((g) => {
      g.addEventListener('click', () => {
        const item = data.items[g.id];
        if (!item) return;
        if (item.group) setTriggerValue('toggle', item.group);
        else setTriggerValue('select', g.id);
      });
    });
    canvas.querySelectorAll('g.cluster').forEach((g) => {
      const path = data.clusters[g.id];
      g.querySelectorAll('text').forEach((t) => t.addEventListener('click', () => setTriggerValue('toggle', path)));
    });
    // Readable first: shrink a wide drawing to the pane, but never below 55% (scroll for the rest, or 'fit').
    if (!pane.dataset.scale) pane.dataset.scale = String(Math.max(0.55, Math.min(1, fit(pane))));
    applyScale(pane);
  }
  pane.querySelector('.xc-info').textContent = data.info || '';
  const marks = { sel: data.selected || [], gap: data.gaps || [], match: data.matches || [] };
  canvas.querySelectorAll('g.node').forEach((g) => {
    for (const [cls, ids] of Object.entries(marks)) g.classList.toggle(cls, ids.includes(g.id));
  });
  const first = canvas.querySelector('g.node.sel') || canvas.querySelector('g.node.match');
  if (first && pane.dataset.scrolled !== (data.scroll_to || '')) {
    pane.dataset.scrolled = data.scroll_to || '';
    if (data.scroll_to) {   // scroll the pane only, never the page
      const a = first.getBoundingClientRect(), c = canvas.getBoundingClientRect();
      canvas.scrollTop += a.top - c.top - canvas.clientHeight / 2 + a.height / 2;
      canvas.scrollLeft += a.left - c.left - canvas.clientWidth / 2 + a.width / 2;
    }
  }
}

function joinSyncGroup(pane) {
  const group = pane._xcData.sync;
  if (!group) return;
  const all = (window.__xcSyncPanes = window.__xcSyncPanes || {});
  all[group] = (all[group] || []).filter((p) => p.isConnected && p !== pane).concat([pane]);
}

function peers(pane) {
  const group = pane._xcData && pane._xcData.sync;
  if (!group || !window.__xcSyncPanes) return [];
  return (window.__xcSyncPanes[group] || []).filter((p) => p !== pane && p.isConnected);
}

function syncScroll(pane) {
  const others = peers(pane);
  if (!others.length) return;
  const canvas = pane.querySelector('.xc-canvas');
  const c = canvas.getBoundingClientRect();
  const map = pane._xcData.counterparts || {};
  // The box with a counterpart nearest the middle of this pane: its counterpart goes to the same place.
  let anchor = null, best = Infinity;
  canvas.querySelectorAll('g.node').forEach((g) => {
    if (!map[g.id]) return;
    const r = g.getBoundingClientRect();
    const d = Math.abs(r.top + r.height / 2 - c.top - c.height / 2) +
              0.25 * Math.abs(r.left + r.width / 2 - c.left - c.width / 2);
    if (d < best) { best = d; anchor = { id: map[g.id], r }; }
  });
  for (const peer of others) {
    const pc = peer.querySelector('.xc-canvas');
    const target = anchor && pc.querySelector('g.node[id="' + anchor.id + '"]');
    peer._xcQuietUntil = performance.now() + 150;
    if (target) {
      const t = target.getBoundingClientRect(), p = pc.getBoundingClientRect();
      pc.scrollTop += (t.top + t.height / 2 - p.top) - (anchor.r.top + anchor.r.height / 2 - c.top);
      pc.scrollLeft += (t.left + t.width / 2 - p.left) - (anchor.r.left + anchor.r.width / 2 - c.left);
    } else {
      const fy = canvas.scrollTop / Math.max(1, canvas.scrollHeight - canvas.clientHeight);
      const fx = canvas.scrollLeft / Math.max(1, canvas.scrollWidth - canvas.clientWidth);
      pc.scrollTop = fy * (pc.scrollHeight - pc.clientHeight);
      pc.scrollLeft = fx * (pc.scrollWidth - pc.clientWidth);
    }
  }
}

function fit(pane) {
  const svg = pane.querySelector('svg');
  const canvas = pane.querySelector('.xc-canvas');
  if (!svg || !canvas.clientWidth) return 1;
  return Math.max(0.2, (canvas.clientWidth - 8) / parseFloat(svg.dataset.w || '1'));
}

function applyScale(pane) {
  const svg = pane.querySelector('svg');
  if (!svg) return;
  const s = parseFloat(pane.dataset.scale || '1');
  svg.setAttribute('width', String(parseFloat(svg.dataset.w) * s));
  svg.setAttribute('height', String(parseFloat(svg.dataset.h) * s));
}
"""

graph_pane = st.components.v2.component("xc_graph_pane", css=_CSS + MARK_CSS + COMPARE_CSS, js=_JS)


def pane_items(v: dict) -> tuple[dict, dict]:
    """What a click on a drawing's box or cluster title means: its items (a group to toggle, a node to select)
    and its clusters (an open group's path), keyed by the SVG ids render_svg gave them."""
    items = {f"b{k}": ({"group": b["path"]} if b["kind"] == "group" else {"node": b["id"]})
             for k, b in enumerate(v["boxes"])}
    return items, {f"c{k}": c["path"] for k, c in enumerate(v["clusters"])}


# Where a drawing's groups come from when the graph carries no module paths.
HIERARCHY_NOTES = {"names": "groups from node-name scopes",
                   "sequence": "no module paths: groups are runs of the node order"}
