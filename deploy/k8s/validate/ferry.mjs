// ferry.mjs: what validate.mjs knows about Ferry itself, and the rules that
// hold the manifests and the Grafana dashboard to it. Three tables are read
// from the project, never copied here, so that they cannot drift:
//   options    each program's options, from `ps-server --help` and
//              `trainer --help` of a build (FERRY_BUILD_DIR, default build/)
//   endpoints  the HTTP paths, from the `endpoints[]` table in obs/src/http.c
//   metrics    every family name, from the C sources that register or write
//              them (ps/, trainer/, obs/): each "ferry_..." string literal;
//              a literal right after OBS_HISTOGRAM is a histogram family
//              (its _bucket, _sum and _count series exist too)
// The metric set comes from the sources rather than from a running job
// (needs a cluster-like set-up and a data set) or from docs/operations.md's
// table (written by hand; its own test checks it against a live scrape).
// Every family, collector-written ones included, is named by one literal in
// its registering call, so a grep of literals sees them all; an extraction
// that finds nothing in a directory is an error, not an empty set.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";

// ---------------------------------------------------------------- facts
// options(build) -> { "ps-server": Set, trainer: Set } from --help, or
// { skip: why } when there is no build or it predates config files.
export function options(build) {
  const out = {};
  for (const [prog, bin] of [["ps-server", "ps/ps-server"], ["trainer", "trainer/trainer"]]) {
    const b = path.join(build, bin);
    if (!fs.existsSync(b)) return { skip: `no ${b}` };
    const help = execFileSync(b, ["--help"], { encoding: "utf8" });
    out[prog] = new Set([...help.matchAll(/^\s+--([a-z][a-z0-9-]*)/gm)].map((m) => m[1]));
    out[prog].delete("help");
    // The manifests pass the ConfigMap's files with --config; a build
    // without it cannot run them (merge the config-file feature first).
    if (!out[prog].has("config")) return { skip: `${b} has no --config (it predates config files)` };
  }
  return out;
}

// endpoints(repo) -> Set of paths served by obs_http (obs/src/http.c).
export function endpoints(repo) {
  const f = path.join(repo, "obs/src/http.c");
  const m = /\bendpoints\[\]\s*=\s*\{([\s\S]*?)\n\};/.exec(fs.readFileSync(f, "utf8"));
  const paths = new Set(m ? [...m[1].matchAll(/\{\s*"(\/[^"]*)"/g)].map((x) => x[1]) : []);
  if (!paths.size) throw new Error(`${f}: no 'endpoints[] = { { "/path", fn }, ... }' table found`);
  return paths;
}

// metrics(repo) -> { names, histograms, labels }: metric families, the
// histogram ones, and every label name written in a label literal.
export function metrics(repo) {
  const names = new Set(), histograms = new Set(), labels = new Set();
  for (const dir of ["ps/src", "trainer/src", "obs/src"]) {
    const before = names.size;
    for (const f of cFiles(path.join(repo, dir))) {
      const text = fs.readFileSync(f, "utf8");
      for (const m of text.matchAll(/"(ferry_[a-zA-Z0-9_]+)"/g)) names.add(m[1]);
      for (const m of text.matchAll(/OBS_HISTOGRAM\s*,\s*"(ferry_[a-zA-Z0-9_]+)"/g)) histograms.add(m[1]);
      for (const m of text.matchAll(/([a-z_][a-z0-9_]*)=\\"/g)) labels.add(m[1]); // label="..." in a C literal
    }
    if (names.size === before)
      throw new Error(`${dir}: no "ferry_..." metric names found; has the registration idiom changed? ` +
        "(see ferry.mjs metrics())");
  }
  return { names, histograms, labels };
}
function cFiles(dir) {
  const out = [];
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...cFiles(p));
    else if (/\.[ch]$/.test(e.name)) out.push(p);
  }
  return out;
}

// ---------------------------------------------------------------- config
// A container's effective configuration: which program it runs and where
// each option's value comes from (flag > FERRY_* environment > --config
// file), as the programs themselves merge them.
const PROGRAMS = new Set(["ps-server", "trainer"]);
const envToOption = (n) => n.slice("FERRY_".length).toLowerCase().replaceAll("_", "-");

function parseFlags(args) {
  const flags = new Map();
  for (let i = 0; i < args.length; i++) {
    const m = /^--([a-z][a-z0-9-]*)(?:=(.*))?$/s.exec(String(args[i]));
    if (!m) continue;
    if (m[2] !== undefined) flags.set(m[1], m[2]);
    else if (i + 1 < args.length && !String(args[i + 1]).startsWith("--")) flags.set(m[1], String(args[++i]));
    else flags.set(m[1], "");
  }
  return flags;
}

// parseConfigFile checks a config file's lines as fb_config does and
// returns Map key -> value; problems go to err.
function parseConfigFile(text, where, err) {
  const out = new Map();
  text.split("\n").forEach((raw, i) => {
    const line = raw.trim(), at = `${where}:${i + 1}`;
    if (line === "" || line.startsWith("#")) return;
    const eq = line.indexOf("=");
    if (eq < 0) return err(`${at}: expected 'key = value' or a # comment, got '${line}'`);
    const key = line.slice(0, eq).trim(), val = line.slice(eq + 1).trim();
    if (!key) return err(`${at}: no key before '='`);
    if (key.startsWith("--")) return err(`${at}: write the key without '--': '${key}'`);
    if (key === "config") return err(`${at}: 'config' cannot be set in a config file`);
    if (out.has(key)) return err(`${at}: '${key}' set twice`);
    out.set(key, val);
  });
  return out;
}

// containerConfig(o, c, configMaps, err) -> null (not a Ferry program) or
// { prog, get(name) -> {value, from} | undefined, names: [[name, from]] }.
export function containerConfig(o, c, spec, configMaps, err) {
  const prog = path.basename(String(c.command?.[0] ?? ""));
  if (!PROGRAMS.has(prog)) return null;
  const cid = `${o.kind}/${o.metadata?.name} container ${c.name}`;
  const flags = parseFlags(c.args ?? []);
  const env = new Map(), file = new Map(), names = [];
  for (const k of flags.keys()) names.push([k, `flag --${k}`]);
  for (const e of c.envFrom ?? []) {
    const cm = e.configMapRef && configMaps.get(e.configMapRef.name);
    for (const [k, v] of Object.entries(cm?.data ?? {})) {
      const full = (e.prefix ?? "") + k;
      if (!full.startsWith("FERRY_")) continue;
      env.set(envToOption(full), String(v));
      names.push([envToOption(full), `variable ${full} (envFrom ConfigMap ${e.configMapRef.name})`]);
    }
  }
  for (const e of c.env ?? []) {
    if (!e.name?.startsWith("FERRY_")) continue;
    env.set(envToOption(e.name), e.value !== undefined ? String(e.value) : undefined);
    names.push([envToOption(e.name), `variable ${e.name}`]);
  }
  const cfgPath = flags.get("config") ?? env.get("config");
  let fileName = null;
  if (cfgPath) {
    const mount = (c.volumeMounts ?? []).find((m) => cfgPath.startsWith(m.mountPath.replace(/\/?$/, "/")));
    const vol = mount && (spec.volumes ?? []).find((v) => v.name === mount.name);
    const cmName = vol?.configMap?.name;
    if (!cmName) err(`${cid}: config file ${cfgPath} is not in a mounted ConfigMap volume`);
    else {
      const rel = cfgPath.slice(mount.mountPath.replace(/\/?$/, "/").length);
      const key = vol.configMap.items ? vol.configMap.items.find((it) => it.path === rel)?.key : rel;
      const text = configMaps.get(cmName)?.data?.[key];
      if (text === undefined) err(`${cid}: config file ${cfgPath}: ConfigMap '${cmName}' has no key '${key ?? rel}'`);
      else {
        fileName = `ConfigMap/${cmName} ${key}`;
        for (const [k, v] of parseConfigFile(String(text), fileName, err)) {
          file.set(k, v);
          names.push([k, `${fileName} key`]);
        }
      }
    }
  }
  const get = (n) => flags.has(n) ? { value: flags.get(n), from: `--${n}` }
    : env.has(n) ? { value: env.get(n), from: `FERRY_${n.toUpperCase().replaceAll("-", "_")}` }
    : file.has(n) ? { value: file.get(n), from: `${fileName} '${n}'` } : undefined;
  return { prog, cid, get, names, fileName };
}

// httpListen(v) -> {host, port} of an http-listen value, or null.
export function httpListen(v) {
  const m = /^(?:http:\/\/)?(\[[^\]]*\]|[^:/[\]]*):(\d+)\/?$/.exec(v ?? "");
  return m ? { host: m[1], port: Number(m[2]) } : null;
}

// ---------------------------------------------------------------- dashboard
// PromQL words that are not metric names.
const PROMQL_WORDS = new Set(["by", "without", "on", "ignoring", "group_left", "group_right",
  "bool", "and", "or", "unless", "offset", "inf", "nan"]);
// Labels that Prometheus' target discovery adds (pod and service roles).
const TARGET_LABELS = new Set(["job", "instance", "namespace", "pod", "service", "container",
  "endpoint", "le", "__name__"]);

// exprProblems(expr, facts) -> [messages] for the metric and label names
// of one PromQL expression.
export function exprProblems(expr, facts) {
  const out = [];
  const labelsUsed = [];
  let e = expr.replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '""');
  e = e.replace(/\{([^}]*)\}/g, (_, body) => {
    for (const m of body.matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)/g)) labelsUsed.push(m[1]);
    return " ";
  });
  e = e.replace(/\[[^\]]*\]/g, " ");
  e = e.replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)/g, (_, kw, list) => {
    for (const l of list.split(",").map((x) => x.trim()).filter(Boolean)) labelsUsed.push(l);
    return " ";
  });
  e = e.replace(/\$\{?[a-zA-Z_][a-zA-Z0-9_]*\}?/g, " "); // Grafana variables
  let metricsSeen = 0;
  for (const m of e.matchAll(/([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?/g)) {
    const [, word, call] = m;
    if (call || PROMQL_WORDS.has(word.toLowerCase())) continue;
    if (/^[0-9]/.test(word)) continue;
    metricsSeen++;
    const base = word.replace(/_(bucket|sum|count)$/, "");
    if (facts.names.has(word)) continue;
    if (base !== word && facts.histograms.has(base)) continue;
    if (base !== word && facts.names.has(base))
      out.push(`metric '${word}': ${base} is not a histogram (no _bucket/_sum/_count series)`);
    else out.push(`metric '${word}' is not registered by ps-server or trainer`);
  }
  if (!metricsSeen) out.push("no metric in the expression");
  for (const l of labelsUsed)
    if (!facts.labels.has(l) && !TARGET_LABELS.has(l)) out.push(`label '${l}' is not written by any Ferry metric`);
  return out;
}

// dashboardProblems(json text, facts) -> [messages].
export function dashboardProblems(text, facts) {
  let d;
  try {
    d = JSON.parse(text);
  } catch (e) {
    return [`not valid JSON: ${e.message}`];
  }
  const out = [];
  if (typeof d !== "object" || d === null || Array.isArray(d)) return ["the top level is not an object"];
  for (const k of ["title", "uid"]) if (typeof d[k] !== "string" || !d[k]) out.push(`no '${k}'`);
  if (typeof d.schemaVersion !== "number") out.push("no numeric 'schemaVersion'");
  if (!Array.isArray(d.panels) || !d.panels.length) return [...out, "no 'panels'"];
  const panels = d.panels.flatMap((p) => (p?.type === "row" ? p.panels ?? [] : [p]));
  const ids = new Set();
  for (const p of panels) {
    const who = `panel ${JSON.stringify(p?.title ?? p?.id ?? "?")}`;
    if (ids.has(p.id)) out.push(`${who}: id ${p.id} used twice`);
    ids.add(p.id);
    if (!Array.isArray(p.targets) || !p.targets.length) { out.push(`${who}: no targets`); continue; }
    for (const t of p.targets) {
      if (typeof t.expr !== "string" || !t.expr.trim()) { out.push(`${who}: a target without 'expr'`); continue; }
      for (const msg of exprProblems(t.expr, facts)) out.push(`${who}: ${msg}`);
    }
  }
  return out;
}

// ---------------------------------------------------------------- manifests
// What a ServiceMonitor may hold: the fields this repository uses and their
// common neighbours. The offline type check has no types for CRDs, so this
// is its structural check: unknown fields and wrong types are errors.
const SM_FIELDS = {
  top: new Set(["apiVersion", "kind", "metadata", "spec"]),
  metadata: new Set(["name", "namespace", "labels", "annotations"]),
  spec: new Set(["selector", "namespaceSelector", "endpoints", "jobLabel", "targetLabels",
    "podTargetLabels", "sampleLimit"]),
  endpoint: new Set(["port", "targetPort", "path", "scheme", "interval", "scrapeTimeout",
    "honorLabels", "params", "relabelings", "metricRelabelings"]),
};
export const CRDS = new Set(["monitoring.coreos.com/v1 ServiceMonitor"]);
const DURATION = /^(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?$/;
const seconds = (d) => {
  const m = DURATION.exec(d);
  return (+(m[2] ?? 0)) * 3600 + (+(m[4] ?? 0)) * 60 + (+(m[6] ?? 0)) + (+(m[8] ?? 0)) / 1000;
};
const METRICS_PATH = "/metrics";

// ferryRules(s, h, facts): Ferry's rules over one rendered set. h holds
// helpers from validate.mjs (err, podSpecOf, podLabelsOf, containersOf,
// matches, configMaps, services, workloads, byKind, id).
export function ferryRules(h, facts) {
  const { err, podSpecOf, podLabelsOf, containersOf, matches, configMaps, services, workloads, byKind, id } = h;
  const httpPortsOf = new Map(); // workload -> Set of http ports its containers serve
  let scheduler = null;

  for (const o of workloads) {
    const spec = podSpecOf(o);
    const ports = new Set();
    httpPortsOf.set(o, ports);
    for (const c of containersOf(o)) {
      const cfg = containerConfig(o, c, spec, configMaps, err);
      if (!cfg) continue;
      const { prog, cid } = cfg;
      // every option name set anywhere is one the program knows
      if (facts.options[prog])
        for (const [n, from] of cfg.names) {
          if (facts.options[prog].has(n)) continue;
          const other = [...PROGRAMS].find((p) => p !== prog && facts.options[p]?.has(n));
          err(`${cid}: ${from}: '${n}' is ${other ? `an option of ${other}, not of ${prog}` : `not an option of ${prog} (--help)`}`);
        }
      const role = prog === "ps-server" ? cfg.get("role")?.value ?? "server" : "trainer";
      if (role === "scheduler") scheduler = cfg;
      // the HTTP port: http-listen, reachable from the kubelet and Prometheus
      const hl = cfg.get("http-listen");
      const listen = hl && httpListen(hl.value);
      if (hl && hl.value !== "" && !listen) err(`${cid}: ${hl.from} = '${hl.value}' is not host:port`);
      if (listen) {
        if (listen.port === 0) err(`${cid}: ${hl.from} uses port 0; probes and scrapes need a fixed port`);
        else if (/^(127\.|localhost$|\[::1\]$)/.test(listen.host))
          err(`${cid}: ${hl.from} = '${hl.value}' listens on loopback; probes and scrapes come from outside the pod`);
        else if (!(c.ports ?? []).some((p) => p.containerPort === listen.port))
          err(`${cid}: ${hl.from} port ${listen.port} is not a containerPort of the container`);
        else ports.add(listen.port);
      }
      // probes: a real endpoint on the http-listen port
      for (const pk of ["readinessProbe", "livenessProbe", "startupProbe"]) {
        const g = c[pk]?.httpGet;
        if (!g) continue;
        const p = String(g.path ?? "/").split("?")[0];
        if (!facts.endpoints.has(p))
          err(`${cid}: ${pk} path '${p}' is not an endpoint of ${prog} (obs/src/http.c: ${[...facts.endpoints].join(", ")})`);
        const port = typeof g.port === "string" ? (c.ports ?? []).find((cp) => cp.name === g.port)?.containerPort : g.port;
        if (!listen) err(`${cid}: ${pk} is an HTTP probe but http-listen is not set`);
        else if (port !== undefined && port !== listen.port)
          err(`${cid}: ${pk} port ${g.port} (${port}) is not the http-listen port ${listen.port} (${hl.from})`);
      }
      if (prog === "ps-server" && !(spec.initContainers ?? []).includes(c)) {
        if (c.livenessProbe?.httpGet?.path !== "/healthz")
          err(`${cid}: livenessProbe must be httpGet /healthz (/readyz is false before the job runs and while a server leaves: a liveness probe on it kills healthy servers)`);
        if (c.readinessProbe?.httpGet?.path !== "/readyz")
          err(`${cid}: readinessProbe must be httpGet /readyz`);
      }
      // a server's leave: --leave-timeout-ms, and the kubelet waits longer
      if (role === "server") {
        const lt = cfg.get("leave-timeout-ms");
        const ms = Number(lt?.value);
        const grace = spec.terminationGracePeriodSeconds ?? 30;
        if (!lt || !Number.isInteger(ms) || ms <= 0)
          err(`${cid}: a server needs leave-timeout-ms > 0 (${lt ? `${lt.from} = '${lt.value}'` : "unset"}), or every SIGTERM loses its shards`);
        else if (grace * 1000 <= ms)
          err(`${id(o)}: terminationGracePeriodSeconds (${grace}) must exceed leave-timeout-ms (${ms} ms, ${lt.from}): the kubelet would kill the server mid-leave`);
      }
    }
    // Prometheus scrape annotations name a served port and /metrics
    const ann = (o.kind === "CronJob" ? o.spec?.jobTemplate?.spec?.template : o.spec?.template)?.metadata?.annotations ?? {};
    if (ann["prometheus.io/scrape"] === "true") {
      const port = Number(ann["prometheus.io/port"]);
      if (!ports.has(port))
        err(`${id(o)}: annotation prometheus.io/port '${ann["prometheus.io/port"]}' is not the http-listen port of a container (${[...ports].join(", ") || "none"})`);
      const p = ann["prometheus.io/path"] ?? METRICS_PATH;
      if (p !== METRICS_PATH || !facts.endpoints.has(p))
        err(`${id(o)}: annotation prometheus.io/path '${p}' is not the metrics endpoint (${METRICS_PATH} in obs/src/http.c)`);
    }
  }

  // Ready means "the job runs", after everyone registered through these
  // Services: they must publish pods that are not ready yet.
  for (const svc of services) {
    const pods = workloads.filter((o) => svc.spec?.selector && matches(svc.spec.selector, podLabelsOf(o)));
    const gated = pods.filter((o) => containersOf(o).some((c) => c.readinessProbe?.httpGet?.path === "/readyz"));
    if (gated.length && svc.spec?.publishNotReadyAddresses !== true)
      err(`${id(svc)}: selects ${gated.map(id).join(", ")}, whose /readyz waits for the job to run; set publishNotReadyAddresses: true or nobody can register`);
  }

  // counts agree with the workloads
  const sts = byKind("StatefulSet").find((o) => o.metadata?.name === "ferry-server");
  const job = byKind("Job").find((o) => o.metadata?.name === "ferry-trainer");
  const dep = byKind("Deployment").find((o) => o.metadata?.name === "ferry-trainer");
  if (scheduler) {
    const sv = scheduler.get("servers"), tr = scheduler.get("trainers");
    if (sts && String(sts.spec.replicas ?? 1) !== String(sv?.value ?? 1))
      err(`${scheduler.cid}: servers (${sv?.value ?? "default 1"}, ${sv?.from ?? "unset"}) != ${id(sts)} replicas (${sts.spec.replicas ?? 1})`);
    // trainers: N (fixed ranks) or MIN:MAX (elastic), as ps-server reads it
    const tv = String(tr?.value ?? "1"), tfrom = `trainers (${tv}, ${tr?.from ?? "default"})`;
    const tm = /^([0-9]+)(?::([0-9]+))?$/.exec(tv);
    const [lo, hi] = tm ? [Number(tm[1]), Number(tm[2] ?? tm[1])] : [NaN, NaN];
    if (!tm || lo < 1 || hi < lo || hi > 4096)
      err(`${scheduler.cid}: ${tfrom} is not N or MIN:MAX with 1 <= MIN <= MAX <= 4096`);
    else {
      if (job && (job.spec.completions !== hi || lo !== hi))
        err(`${scheduler.cid}: ${tfrom} != ${id(job)} completions (${job.spec.completions ?? "unset"}); a Job of ranks needs fixed trainers = completions`);
      const n = dep?.spec?.replicas ?? 1;
      if (dep && (n < lo || n > hi))
        err(`${scheduler.cid}: ${id(dep)} replicas (${n}) outside ${tfrom}: the job ${n < lo ? "never starts" : `refuses the trainers beyond ${hi}`}`);
    }
  }
  // A trainer Deployment's pods are alike: a rank given to all of them
  // would make every pod but one be refused. The scheduler assigns ranks.
  for (const c of dep ? containersOf(dep) : []) {
    const cfg = containerConfig(dep, c, podSpecOf(dep), configMaps, () => {});
    const rank = cfg?.prog === "trainer" && cfg.get("rank");
    if (rank && rank.value !== "any")
      err(`${cfg.cid}: ${rank.from} = '${rank.value}': every replica would ask for that rank; leave it unset (the scheduler assigns one)`);
  }

  // servers: a PodDisruptionBudget covers them
  const pdbs = byKind("PodDisruptionBudget");
  for (const pdb of pdbs) {
    if (!workloads.some((o) => matches(pdb.spec?.selector?.matchLabels, podLabelsOf(o))) ||
        !Object.keys(pdb.spec?.selector?.matchLabels ?? {}).length)
      err(`${id(pdb)}: selector ${JSON.stringify(pdb.spec?.selector)} selects no pod template`);
    if (pdb.spec?.maxUnavailable === undefined && pdb.spec?.minAvailable === undefined)
      err(`${id(pdb)}: sets neither maxUnavailable nor minAvailable`);
  }
  if (sts && !pdbs.some((p) => Object.keys(p.spec?.selector?.matchLabels ?? {}).length &&
      matches(p.spec.selector.matchLabels, podLabelsOf(sts))))
    err(`${id(sts)}: no PodDisruptionBudget selects the servers`);

  // NetworkPolicy: every pod covered; only the job's pods, or the metrics
  // port from a namespace
  const nps = byKind("NetworkPolicy");
  const allHttp = new Set([...httpPortsOf.values()].flatMap((s) => [...s]));
  for (const o of workloads) {
    const covered = nps.some((np) => (np.spec?.policyTypes ?? ["Ingress"]).includes("Ingress") &&
      matches(np.spec?.podSelector?.matchLabels, podLabelsOf(o)));
    if (!covered) err(`${id(o)}: no NetworkPolicy restricts ingress to its pods`);
  }
  for (const np of nps) {
    const selected = workloads.filter((o) => matches(np.spec?.podSelector?.matchLabels, podLabelsOf(o)));
    const isHttp = (p) => p.port === "http" || allHttp.has(p.port);
    (np.spec?.ingress ?? []).forEach((r, i) => {
      const at = `${id(np)} ingress[${i}]`;
      if (!r.from?.length) return err(`${at}: no 'from': admits every source`);
      for (const peer of r.from) {
        if (peer.ipBlock) err(`${at}: ipBlock peers admit pods outside the job`);
        if (peer.namespaceSelector) {
          if (!Object.keys(peer.namespaceSelector.matchLabels ?? {}).length && !peer.namespaceSelector.matchExpressions)
            err(`${at}: an empty namespaceSelector admits every namespace`);
          if (!r.ports?.length || !r.ports.every(isHttp))
            err(`${at}: another namespace may reach only the metrics (http) port`);
        } else if (peer.podSelector) {
          const sel = peer.podSelector.matchLabels ?? {};
          if (!Object.keys(sel).length || !workloads.some((o) => matches(sel, podLabelsOf(o))))
            err(`${at}: podSelector ${JSON.stringify(sel)} is not the job's pods`);
        }
      }
      for (const p of r.ports ?? [])
        if (typeof p.port === "string" && !selected.some((o) => containersOf(o).some((c) => (c.ports ?? []).some((cp) => cp.name === p.port))))
          err(`${at}: port '${p.port}' is not a named port of the pods it selects`);
    });
  }

  // ServiceMonitor: structure (no types offline), and it scrapes /metrics
  // on a port of the Services it selects
  for (const sm of byKind("ServiceMonitor")) {
    const at = id(sm);
    const extra = (obj, allowed, where) => {
      if (typeof obj !== "object" || obj === null || Array.isArray(obj)) return err(`${at}: ${where} is not an object`);
      for (const k of Object.keys(obj)) if (!allowed.has(k)) err(`${at}: unknown field ${where}.${k}`);
    };
    extra(sm, SM_FIELDS.top, "(top)");
    extra(sm.metadata, SM_FIELDS.metadata, "metadata");
    if (typeof sm.metadata?.name !== "string") err(`${at}: metadata.name is required`);
    extra(sm.spec, SM_FIELDS.spec, "spec");
    const sel = sm.spec?.selector?.matchLabels;
    if (!sel || typeof sel !== "object" || !Object.keys(sel).length) err(`${at}: spec.selector.matchLabels is required`);
    const chosen = services.filter((v) => sel && matches(sel, v.metadata?.labels ?? {}));
    if (sel && !chosen.length) err(`${at}: selector ${JSON.stringify(sel)} matches no Service's labels`);
    if (!Array.isArray(sm.spec?.endpoints) || !sm.spec.endpoints.length) err(`${at}: spec.endpoints must be a non-empty list`);
    (sm.spec?.endpoints ?? []).forEach((e, i) => {
      const w = `spec.endpoints[${i}]`;
      extra(e, SM_FIELDS.endpoint, w);
      if (typeof e.port !== "string") return err(`${at}: ${w}.port must name a Service port`);
      for (const v of chosen)
        if (!(v.spec?.ports ?? []).some((p) => p.name === e.port))
          err(`${at}: ${w}.port '${e.port}' is not a port of ${id(v)}`);
      if ((e.path ?? METRICS_PATH) !== METRICS_PATH || !facts.endpoints.has(e.path ?? METRICS_PATH))
        err(`${at}: ${w}.path '${e.path}' is not the metrics endpoint (${METRICS_PATH})`);
      if (e.scheme !== undefined && e.scheme !== "http") err(`${at}: ${w}.scheme '${e.scheme}': Ferry serves plain http`);
      for (const k of ["interval", "scrapeTimeout"])
        if (e[k] !== undefined && (typeof e[k] !== "string" || !e[k] || !DURATION.test(e[k])))
          err(`${at}: ${w}.${k} '${e[k]}' is not a duration like 15s`);
      if (DURATION.test(e.interval ?? "") && DURATION.test(e.scrapeTimeout ?? "") && e.interval && e.scrapeTimeout &&
          seconds(e.scrapeTimeout) > seconds(e.interval))
        err(`${at}: ${w}.scrapeTimeout exceeds interval`);
    });
  }
}
