"""The report's HTML pages: plain HTML and one stylesheet, charts inline as SVG, no script; every value
escaped. Pages link to each other with relative paths, so the site works from a file:// URL.

The certificates reach here checked against data/certificate.schema.json (types), so what is left to
guard is values: NaN and infinities (a diverged run records them) and numbers too large for a float."""

from __future__ import annotations

import datetime as dt
from html import escape
from typing import Any

from mcore_images.catalogue import components, drivers, gpu_archs, platforms, tags
from mcore_images.catalogue.stacks import Stack
from mcore_images.report import charts
from mcore_images.report.inputs import Certificate
from mcore_images.resolve import rules

CSS = """body{font-family:system-ui,sans-serif;margin:1.5rem;color:#1b1b1b;max-width:1500px}
table{border-collapse:collapse;margin:.5rem 0 1.5rem;font-size:.85rem}
th,td{border:1px solid #ccc;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#f2f2f2}code{font-size:.8rem}nav a{margin-right:1rem}
.passed{background:#d9f2d9}.failed,.invalid,.could-not-run{background:#f8d7d7}.stale{background:#fff0c2}
.none,.skipped{background:#eee}.note{background:#eef4ff;padding:.5rem 1rem;border-left:4px solid #6a8fd8}
svg{max-width:100%;height:auto}td code{white-space:nowrap}td code.tag{white-space:normal;overflow-wrap:anywhere}"""


def page(title: str, body: list[str]) -> str:
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            f"<title>{escape(title)}</title>",
            '<link rel="stylesheet" href="style.css">',
            "</head>",
            "<body>",
            '<nav><a href="index.html">Images</a><a href="matrix.html">Compatibility matrix</a>'
            '<a href="build.html">Build efficiency</a></nav>',
            f"<h1>{escape(title)}</h1>",
            *body,
            "</body>",
            "</html>",
            "",
        ]
    )


def table(head: list[str], rows: list[list[str]], css_id: str, row_classes: list[str] | None = None) -> str:
    """A table whose cells are already HTML (escape what comes from input before passing it)."""
    out = [
        f'<table id="{css_id}">',
        "<thead><tr>" + "".join(f"<th>{escape(h)}</th>" for h in head) + "</tr></thead>",
        "<tbody>",
    ]
    for i, row in enumerate(rows):
        cls = f' class="{escape(row_classes[i])}"' if row_classes else ""
        out.append(f"<tr{cls}>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def num(value: Any, fmt: str = ".4g") -> str:
    """A number formatted; NaN and infinities as themselves; anything else (or too large for a float) as –."""
    number = charts.finite(value)
    if number is not None:
        return escape(format(number, fmt))
    return escape(str(value)) if isinstance(value, float) else "–"


def _short_digest(digest: object) -> str:
    """The first 12 hex digits, the whole digest in the title (tooltip) and data-digest."""
    if not isinstance(digest, str) or not digest:
        return "–"
    short = digest[: len("sha256:") + 12]
    return f'<code title="{escape(digest)}" data-digest="{escape(digest)}">{escape(short)}…</code>'


def _date(cert: Certificate) -> str:
    created = cert.created
    return created.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC") if created else "–"


def index(stacks: dict[str, Stack], certs: list[Certificate]) -> str:
    """Stacks × layers with their tags, the newest certificate of each, and every certificate that could
    not be filed (with the reason)."""
    body: list[str] = []
    if not certs:
        body.append(
            '<p class="note" id="empty">No certificates were given. Feed the report the folders '
            "<code>mcore-images certify</code> wrote (each holds a <code>certificate.json</code>), e.g. "
            "<code>mcore-images report --out build/report build/release-local</code>; the table below "
            "lists what env/stacks.json would build.</p>"
        )
    def later(cert: Certificate, than: Certificate | None) -> bool:
        oldest = dt.datetime.min.replace(tzinfo=dt.UTC)
        return than is None or (cert.created or oldest) > (than.created or oldest)

    newest: dict[tuple[str, str], Certificate] = {}
    per_platform: dict[tuple[str, str, str], Certificate] = {}  # the tag's platforms, each its newest
    for cert in certs:
        if cert.stack and cert.layer:
            if later(cert, newest.get((cert.stack, cert.layer))):
                newest[(cert.stack, cert.layer)] = cert
            if later(cert, per_platform.get((cert.stack, cert.layer, cert.platform))):
                per_platform[(cert.stack, cert.layer, cert.platform)] = cert
    rows, classes = [], []
    for stack in stacks.values():
        for layer in stack.built_layers:
            full, alias = tags.tags(layer, stack)
            cert = newest.get((stack.name, layer))
            status = cert.status if cert else "none"
            data = (cert.data or {}) if cert else {}
            image = data.get("image") or {}
            size = image.get("size")
            budget = stack.size_budget_gb.get(layer)
            size_text = (f"{size / 1e9:.2f} GB (compressed content)" if isinstance(size, int) else "–") + (
                f" (budget {budget:g} GB compressed)" if budget else ""
            )
            link = f'<a href="{cert.slug}.html">{escape(status)}</a>' if cert else "none"
            why = f"<br><small>{escape('; '.join(cert.stale))}</small>" if cert and cert.stale else ""
            rows.append(
                [
                    escape(stack.name),
                    escape(layer),
                    f'<code class="tag">{escape(full)}</code>',
                    f"<code>{escape(alias)}</code>",
                    _short_digest(image.get("digest")),
                    link + why,
                    escape(cert.gpu) if cert else "–",
                    escape(_date(cert)) if cert else "–",
                    escape(drivers.min_driver(stack.cuda) or "–"),
                    size_text,
                    escape(gpu_archs.serves(stack.cuda_archs)) if layer != "base" else "–",
                    _platforms(stack, layer, per_platform),
                ]
            )
            classes.append(status)
    body += [
        "<h2>Stacks and layers</h2>",
        table(
            [
                "stack",
                "layer",
                "full tag",
                "short alias",
                "digest",
                "certificate",
                "certified on",
                "date",
                "min driver",
                "size",
                "GPU architectures",
                "platforms",
            ],
            rows,
            "images",
            classes,
        ),
    ]
    others = [c for c in certs if not (c.stack and c.layer)]
    if others:
        body.append("<h2>Certificates not filed under a stack</h2>")
        body.append(
            table(
                ["file", "status", "reason"],
                [
                    [
                        f"<code>{escape(str(c.path))}</code>",
                        escape(c.status),
                        escape(c.problem or "its image labels and package versions match no stack in env/stacks.json"),
                    ]
                    for c in others
                ],
                "unfiled",
                [c.status for c in others],
            )
        )
    listed = [c for c in certs if c.data is not None]
    if listed:
        body.append("<h2>All certificates</h2>")
        body.append(
            table(
                ["certificate", "stack / layer", "status", "certified on", "date", "filed by"],
                [
                    [
                        f'<a href="{c.slug}.html">{escape(str(c.path))}</a>',
                        escape(f"{c.stack or '–'} / {c.layer or '–'}"),
                        escape(c.status),
                        escape(c.gpu),
                        escape(_date(c)),
                        escape(c.matched_by or "–"),
                    ]
                    for c in listed
                ],
                "certificates",
                [c.status for c in listed],
            )
        )
    return page("mcore-images: images and certificates", body)


def _platforms(stack: Stack, layer: str, certified: dict[tuple[str, str, str], Certificate]) -> str:
    """Each platform the tag names (the stack's), with the newest certificate of that platform's image."""
    cells = []
    for name in stack.platforms:
        cert = certified.get((stack.name, layer, name))
        arch = platforms.BY_NAME[name].arch
        shown = f'<a href="{cert.slug}.html">{escape(cert.status)}</a>' if cert else "none"
        cells.append(f'<span class="{escape(cert.status if cert else "none")}">{escape(arch)}: {shown}</span>')
    return "<br>".join(cells)


def _archs(archs: Any) -> str:
    """What a certificate records of the GPU architectures the image declares (smoke: environment.gpu_archs)."""
    if not isinstance(archs, dict) or not archs.get("declared"):
        return "– (not recorded)"
    return escape(f"{archs['declared']}: {archs.get('gpus') or '–'}")


def certificate_page(cert: Certificate) -> str:
    data = cert.data or {}
    env, image, settings = data.get("environment") or {}, data.get("image") or {}, data.get("settings") or {}
    pkgs = env.get("packages") or {}
    runs = [r for r in data.get("runs") or [] if isinstance(r, dict)]
    body = [
        table(
            ["", ""],
            [
                [
                    "status",
                    f'<span class="{escape(cert.status)}">{escape(cert.status)}</span>'
                    + (f" — {escape('; '.join(cert.stale))}" if cert.stale else ""),
                ],
                ["image", f"<code>{escape(str(image.get('ref') or '–'))}</code>"],
                [
                    "digest",
                    f"<code>{escape(str(image.get('digest') or '–'))}</code> "
                    f"({escape(str(image.get('digest_source') or '–'))})",
                ],
                [
                    "stack / layer",
                    escape(f"{cert.stack or '–'} / {cert.layer or '–'} (filed by {cert.matched_by or '–'})"),
                ],
                ["created", escape(_date(cert))],
                [
                    "hardware",
                    escape(
                        f"{cert.gpu}, driver {(env.get('gpu') or {}).get('driver') or '–'}, "
                        f"CUDA {env.get('cuda') or '–'}, NCCL {env.get('nccl') or '–'}"
                    ),
                ],
                ["packages", escape(", ".join(f"{n} {pkgs.get(n) or '–'}" for n in components.certificate_packages()))],
                ["GPU architectures", _archs(env.get("gpu_archs"))],
                ["platform", escape(f"{cert.platform}" + (f" (machine {(env.get('platform') or {}).get('machine')})"
                                                         if isinstance(env.get("platform"), dict) else
                                                         " (not recorded in the certificate)"))],
                [
                    "settings",
                    escape(
                        f"{settings.get('world_size', '?')} rank(s), {settings.get('backend', '?')}, "
                        f"{settings.get('dtype', '?')}, {settings.get('steps', '?')} steps"
                    ),
                ],
                ["image tests", escape(str((data.get("image_tests") or {}).get("summary") or "–"))],
                ["file", f"<code>{escape(str(cert.path))}</code>"],
            ],
            "facts",
        )
    ]
    body.append("<h2>Runs</h2>")
    body.append(
        table(
            ["run", "status", "loss first → last", "grad norm 0", "Δloss vs dp", "Δgrad vs dp", "build s", "step ms"],
            [_run_row(r) for r in runs],
            "runs",
            [str(r.get("status")) for r in runs],
        )
    )
    curves = {str(r.get("id")): r.get("losses") or [] for r in runs if r.get("status") != "skipped"}
    body += [
        "<h2>Loss per layout</h2>",
        '<div class="chart" id="chart-losses">',
        charts.loss_curves(curves, "Loss per step, every layout"),
        "</div>",
    ]
    parity_keys = ("loss_rel", "loss_tol", "grad_norm_rel", "grad_norm_tol")
    par = [
        (str(r.get("id")), *values)
        for r in runs
        if isinstance(p := r.get("parity"), dict)
        and None not in (values := tuple(charts.drawable(p.get(k)) for k in parity_keys))
    ]
    if par:
        body += ["<h2>Cross-layout parity</h2>", '<div class="chart" id="chart-parity">', charts.parity(par), "</div>"]
    timing = data.get("timing") or {}
    parts = {
        k.removesuffix("_s"): seconds
        for k in ("launch_to_rank_s", "imports_s", "init_s", "build_s", "steps_s", "teardown_s")
        if (seconds := charts.drawable(timing.get(k))) is not None
    }
    wall = charts.drawable(timing.get("wall_s"))
    if parts and wall is not None and wall > sum(parts.values()):
        # the checkpoint round trips, the checks and the certificate writes between the timed parts
        parts["other"] = wall - sum(parts.values())
    if parts:
        body += ["<h2>Wall time</h2>", '<div class="chart" id="chart-wall">', charts.wall_time(parts), "</div>"]
    body += _checkpoint(data.get("checkpoint")) + _bench(data.get("bench")) + _bridge(data.get("bridge"))
    failed = [
        (str(r.get("id")), c) for r in runs for c in r.get("checks") or [] if isinstance(c, dict) and not c.get("ok")
    ]
    if failed:
        body += (
            ["<h2>Failed checks</h2>", "<ul>"]
            + [
                f"<li>{escape(rid)}: {escape(str(c.get('name')))} — {escape(str(c.get('detail', '')))}</li>"
                for rid, c in failed
            ]
            + ["</ul>"]
        )
    return page(f"Certificate: {cert.stack or 'image'} {cert.layer or ''} — {cert.status}", body)


def _run_row(r: dict[str, Any]) -> list[str]:
    losses, norms, par, tm = (
        r.get("losses") or [],
        r.get("grad_norms") or [],
        r.get("parity") or {},
        r.get("timing") or {},
    )
    status = str(r.get("status")) + (f": {r['reason']}" if r.get("reason") else "")
    step = charts.finite(tm.get("step_median_s"))
    return [
        escape(str(r.get("id"))),
        escape(status),
        f"{num(losses[0])} → {num(losses[-1])}" if losses else "–",
        num(norms[0] if norms else None),
        num(par.get("loss_rel"), ".2e"),
        num(par.get("grad_norm_rel"), ".2e"),
        num(tm.get("build_s"), ".2f"),
        num(None if step is None else step * 1000, ".1f"),
    ]


def _checkpoint(section: Any) -> list[str]:
    if not isinstance(section, dict):
        return []
    pairs = [p for p in section.get("pairs") or [] if isinstance(p, dict)]
    return [
        f"<h2>Checkpoint round trips: {escape(str(section.get('verdict')))}</h2>",
        table(
            [
                "saved in → loaded in",
                "model/spec",
                "status",
                "MiB",
                "save s",
                "background s",
                "load s",
                "Δloss",
                "Δgrad norm",
            ],
            [
                [
                    escape(f"{p.get('saved_in')} → {p.get('loaded_in')}"),
                    escape(f"{p.get('model')}/{p.get('spec')}"),
                    escape(str(p.get("status")) + (f": {p['reason']}" if p.get("reason") else "")),
                    num(p["bytes"] / 2**20 if isinstance(p.get("bytes"), int) else None, ".1f"),
                    num(p.get("save_s"), ".2f"),
                    num(p.get("finish_s"), ".2f") if p.get("async_save") else "–",
                    num(p.get("load_s"), ".2f"),
                    num(p.get("loss_rel"), ".2e"),
                    num(p.get("grad_norm_rel"), ".2e"),
                ]
                for p in pairs
            ],
            "checkpoint",
            [str(p.get("status")) for p in pairs],
        ),
    ]


def _bench(section: Any) -> list[str]:
    if not isinstance(section, dict):
        return []
    rows, classes = [], []
    for r in section.get("results") or []:
        if not isinstance(r, dict):
            continue
        gate = r.get("gate") or {}
        mfu, change = charts.finite(r.get("mfu")), charts.finite(gate.get("change_pct"))
        rows.append(
            [
                escape(f"{r.get('config')}/{r.get('spec')}/{r.get('variant')}/{r.get('precision')}"),
                num(r.get("step_ms_median"), ".1f"),
                num(r.get("tokens_per_s"), ",.0f"),
                num(r.get("tflops_per_gpu"), ".1f"),
                num(gate.get("baseline"), ".1f"),
                f"{mfu * 100:.1f} %" if mfu is not None else "–",
                escape(str(gate.get("status", "–"))) + (f" ({change:+.1f} %)" if change is not None else ""),
            ]
        )
        classes.append(str(gate.get("status", "none")))
    return [
        f"<h2>Bench: {escape(str(section.get('status')))}</h2>",
        table(
            ["config/spec/variant/precision", "step ms", "tokens/s", "TFLOP/s/GPU", "baseline TFLOP/s/GPU", "MFU",
             "gate"],
            rows,
            "bench",
            classes,
        ),
    ]


def _bridge(section: Any) -> list[str]:
    if not isinstance(section, dict):
        return []
    return [
        f"<h2>Bridge check: {escape(str(section.get('status', '–')))}</h2>",
        f"<p>exit {escape(str(section.get('exit_code', '–')))}; {escape(str(section.get('error') or ''))}</p>",
    ]


def matrix(stacks: dict[str, Stack]) -> str:
    """Every stack's pins side by side, with its compatibility-rule verdict and oldest driver."""
    comps = list(components.CATALOGUE)
    rows, classes = [], []
    for stack in stacks.values():
        violations = rules.check(stack)
        verdict = "ok" if not violations else "; ".join(f"{v.rule}: {v.message}" for v in violations)
        rows.append(
            [escape(stack.name), escape(stack.flavor)]
            + [escape(str(getattr(stack, c.key))) for c in comps]
            + [escape(drivers.min_driver(stack.cuda) or "–"), escape(", ".join(stack.groups) or "–"), escape(verdict)]
        )
        classes.append("passed" if not violations else "failed")
    return page(
        "Compatibility matrix",
        [
            "<p>The pins of env/stacks.json and the compatibility rules (src/mcore_images/resolve/rules.py) every "
            "build is checked against.</p>",
            table(
                ["stack", "flavor"] + [c.title for c in comps] + ["min driver", "groups", "rules"],
                rows,
                "matrix",
                classes,
            ),
        ],
    )


def build_page(runs: list[dict[str, Any]]) -> str:
    body: list[str] = []
    if not runs:
        body.append(
            '<p class="note" id="no-timings">No build timings were given: pass '
            "<code>--build-timings FILE</code> with the JSON <code>mcore-images build-timing --out FILE</code> "
            "writes (CI's layer-reuse check writes <code>build/layer-reuse.json</code>).</p>"
        )
        return page("Build efficiency", body)
    stages = sorted({s for r in runs for s in r["stages"]})
    body += [
        '<div class="chart" id="chart-build">',
        charts.build_efficiency(runs),
        "</div>",
        table(
            ["scenario", "wall s", *stages],
            [
                [
                    escape(str(r["scenario"])),
                    num(r["wall_s"], ".1f"),
                    *[escape(r["stages"].get(s, "–")) for s in stages],
                ]
                for r in runs
            ],
            "build",
        ),
    ]
    return page("Build efficiency", body)
