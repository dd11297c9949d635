// validate.mjs: offline checks of Ferry's Kubernetes manifests, as in
// docs/k8s-validation.md. Run through validate.sh (which installs the pinned
// npm packages first).
//
// Sets checked: every overlay in ../overlays (must pass), and every case in
// ./bad (each must be rejected by the validator its header names). A set is
// rendered, then goes through five validators:
//   yamllint  syntax, duplicate keys, style (the set's source files)
//   tsc       a type check against kubernetes-types: wrong apiVersion/kind,
//             misspelled fields, wrong types, missing required fields
//   schema    kubernetes-models' JSON schemas: enums, quantities, types
//   rules     what only an API server or Ferry itself would catch (below,
//             and ferry.mjs: config files, probes, grace periods, scrape
//             annotations, PodDisruptionBudget, NetworkPolicy, and the
//             structure of the ServiceMonitor CRD, which has no types)
//   kustomize when `kubectl kustomize` works, its rendering must equal ours
// The Grafana dashboards in deploy/monitoring form one more set, checked by
//   dashboard valid JSON; every panel's PromQL names registered metrics
//
// A bad case is a kustomization directory (usually ../../overlays/cpu plus a
// patch) or a single manifest file; its first lines say what must reject it:
//   # expect: <validator> <text that must appear in one of its messages>
// (one line per expectation; every one must be met). `# needs: build` skips
// a case when no build of ps-server and trainer is there. A bad dashboard
// case is a directory of *.json files and a file `expect` holding those lines.
//
// Options: -v prints every message of the bad cases too.
import { execFileSync, spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { createRequire } from "node:module";
import YAML from "yaml";
import * as ferry from "./ferry.mjs";

const require = createRequire(import.meta.url);
const HERE = path.dirname(fileURLToPath(import.meta.url));
const K8S = path.resolve(HERE, "..");
const REPO = path.resolve(K8S, "../..");
const OUT = path.join(HERE, ".out");
const VERBOSE = process.argv.includes("-v");
const rel = (p) => path.relative(REPO, p);

// ---------------------------------------------------------------- renderer
// A small subset of kustomize, enough for our overlays: `resources` (files,
// or directories holding a kustomization.yaml), `patches` (strategic-merge
// patch files, `path:` only) and `images`. Anything else is an error, so
// that no field is silently ignored.
const KUSTOMIZE_FIELDS = new Set(["apiVersion", "kind", "resources", "patches", "images"]);
// Strategic-merge keys of the lists our manifests use; other lists are replaced.
const MERGE_KEYS = {
  containers: "name", initContainers: "name", env: "name", volumes: "name",
  volumeMounts: "mountPath", imagePullSecrets: "name", tolerations: null,
  ports: (l) => (l.some((e) => e && "containerPort" in e) ? "containerPort" : "port"),
};

function parseDocs(file) {
  const text = fs.readFileSync(file, "utf8");
  const docs = YAML.parseAllDocuments(text, { uniqueKeys: true });
  const out = [];
  for (const d of docs) {
    if (d.errors.length) throw new Error(`${rel(file)}: ${d.errors[0].message}`);
    const v = d.toJS();
    if (v !== null && v !== undefined) out.push(v);
  }
  return out;
}

function render(dir, files) {
  const kfile = path.join(dir, "kustomization.yaml");
  files.push(kfile);
  const [k] = parseDocs(kfile);
  for (const key of Object.keys(k ?? {}))
    if (!KUSTOMIZE_FIELDS.has(key))
      throw new Error(`${rel(kfile)}: field '${key}' is not supported by validate.mjs's renderer`);
  let objs = [];
  for (const r of k.resources ?? []) {
    const p = path.resolve(dir, r);
    if (fs.statSync(p).isDirectory()) objs.push(...render(p, files));
    else { files.push(p); objs.push(...parseDocs(p)); }
  }
  for (const p of k.patches ?? []) {
    if (!p.path || p.target || p.patch || p.options)
      throw new Error(`${rel(kfile)}: only 'patches: - path: FILE' is supported`);
    const pf = path.resolve(dir, p.path);
    files.push(pf);
    for (const patch of parseDocs(pf)) {
      const i = objs.findIndex((o) => o.apiVersion === patch.apiVersion &&
        o.kind === patch.kind && o.metadata?.name === patch.metadata?.name);
      if (i < 0)
        throw new Error(`${rel(pf)}: no resource ${patch.apiVersion} ${patch.kind} ${patch.metadata?.name} to patch`);
      objs[i] = smp(objs[i], patch, "");
    }
  }
  for (const img of k.images ?? []) {
    for (const o of objs) for (const c of containersOf(o)) {
      const m = /^(.*?)(?::([^:/@]+))?(?:@(.+))?$/.exec(c.image ?? "");
      if (!m || m[1] !== img.name) continue;
      let s = img.newName ?? m[1];
      if (img.digest) s += "@" + img.digest;
      else if (img.newTag !== undefined) s += ":" + img.newTag;
      else if (m[2]) s += ":" + m[2];
      c.image = s;
    }
  }
  return objs;
}

function smp(base, patch, where) {
  if (patch === null) return undefined;
  if (Array.isArray(patch)) {
    let key = MERGE_KEYS[where];
    if (typeof key === "function") key = key([...(base ?? []), ...patch]);
    if (!key || !Array.isArray(base)) return structuredClone(patch);
    const out = structuredClone(base);
    const added = [];
    for (const p of patch) {
      const i = out.findIndex((e) => e?.[key] === p?.[key]);
      if (i < 0) added.push(structuredClone(p));
      else out[i] = smp(out[i], p, "");
    }
    return [...added, ...out]; // kustomize puts new entries first

  }
  if (typeof patch !== "object" || typeof base !== "object" || base === null || Array.isArray(base))
    return structuredClone(patch);
  const out = structuredClone(base);
  for (const [k, v] of Object.entries(patch)) {
    if (k.startsWith("$")) throw new Error(`patch directive ${k} is not supported`);
    const m = smp(out[k], v, k);
    if (m === undefined) delete out[k]; else out[k] = m;
  }
  return out;
}

function podSpecOf(o) {
  if (o.kind === "Pod") return o.spec;
  if (o.kind === "CronJob") return o.spec?.jobTemplate?.spec?.template?.spec;
  return o.spec?.template?.spec;
}
function podLabelsOf(o) {
  if (o.kind === "Pod") return o.metadata?.labels ?? {};
  if (o.kind === "CronJob") return o.spec?.jobTemplate?.spec?.template?.metadata?.labels ?? {};
  return o.spec?.template?.metadata?.labels ?? {};
}
function containersOf(o) {
  const s = podSpecOf(o);
  return s ? [...(s.initContainers ?? []), ...(s.containers ?? [])] : [];
}
const id = (o) => `${o.kind}/${o.metadata?.name}`;

// ---------------------------------------------------------------- sets
function loadSets() {
  const sets = [];
  const ov = path.join(K8S, "overlays");
  for (const d of fs.readdirSync(ov).sort())
    sets.push({ name: `overlays/${d}`, src: path.join(ov, d), bad: false });
  const mon = path.join(REPO, "deploy/monitoring");
  sets.push({ name: "monitoring", src: mon, bad: false, dashboards: jsonFiles(mon) });
  const bad = path.join(HERE, "bad");
  for (const d of fs.readdirSync(bad).sort()) {
    const src = path.join(bad, d);
    const dash = fs.statSync(src).isDirectory() && !fs.existsSync(path.join(src, "kustomization.yaml"));
    const head = dash ? path.join(src, "expect")
      : fs.statSync(src).isDirectory() ? path.join(src, "kustomization.yaml") : src;
    const expect = [];
    for (const line of fs.readFileSync(head, "utf8").split("\n")) {
      const m = /^#\s*expect:\s*(\S+)\s+(.+?)\s*$/.exec(line);
      if (m) expect.push({ validator: m[1], text: m[2] });
    }
    if (!expect.length) throw new Error(`${rel(head)}: no '# expect: <validator> <text>' line`);
    const needsBuild = /^#\s*needs:\s*build\s*$/m.test(fs.readFileSync(head, "utf8"));
    sets.push({ name: `bad/${d}`, src, bad: true, expect, skip: needsBuild && !!FACTS.options.skip,
      dashboards: dash ? jsonFiles(src) : undefined });
  }
  for (const s of sets) {
    s.errors = []; // {validator, msg}
    s.files = [];
    s.objs = [];
    if (s.dashboards) continue;
    try {
      if (fs.statSync(s.src).isDirectory()) s.objs = render(s.src, s.files);
      else { s.files.push(s.src); s.objs = parseDocs(s.src); }
    } catch (e) {
      s.objs = [];
      s.errors.push({ validator: "render", msg: e.message });
    }
  }
  return sets;
}

function jsonFiles(dir) {
  return fs.readdirSync(dir).filter((f) => f.endsWith(".json")).sort().map((f) => path.join(dir, f));
}

// ---------------------------------------------------------------- yamllint
function yamllint(sets) {
  const files = [...new Set(sets.flatMap((s) => s.files))];
  const r = spawnSync("yamllint", ["-f", "parsable", "-c", path.join(HERE, "yamllint.yaml"), ...files],
    { encoding: "utf8" });
  if (r.error) throw new Error(`yamllint: ${r.error.message} (apt-get install yamllint)`);
  const byFile = new Map();
  for (const line of r.stdout.split("\n")) {
    const m = /^(.+?):(\d+):(\d+): \[(\w+)\] (.*)$/.exec(line);
    if (!m) continue;
    const f = path.resolve(m[1]);
    if (!byFile.has(f)) byFile.set(f, []);
    byFile.get(f).push(`${rel(f)}:${m[2]}:${m[3]}: ${m[4]}: ${m[5]}`);
  }
  if (r.status !== 0 && byFile.size === 0) throw new Error(`yamllint failed: ${r.stderr}`);
  for (const s of sets) for (const f of s.files)
    for (const msg of byFile.get(f) ?? []) s.errors.push({ validator: "yamllint", msg });
}

// ---------------------------------------------------------------- tsc
// Each object becomes `const oN: <Type> = <JSON>;`. The type is chosen by
// kind; its apiVersion field is a literal type, so a wrong apiVersion is a
// type error, and object-literal excess property checks catch misspelled
// fields at any depth.
const TYPES = {
  ConfigMap: "core/v1", Secret: "core/v1", Service: "core/v1", Pod: "core/v1",
  ServiceAccount: "core/v1", PersistentVolumeClaim: "core/v1", Namespace: "core/v1",
  Deployment: "apps/v1", StatefulSet: "apps/v1", DaemonSet: "apps/v1",
  Job: "batch/v1", CronJob: "batch/v1", PodDisruptionBudget: "policy/v1",
  NetworkPolicy: "networking/v1",
};
function tsc(sets) {
  fs.rmSync(path.join(OUT, "ts"), { recursive: true, force: true });
  fs.mkdirSync(path.join(OUT, "ts"), { recursive: true });
  const fileSet = new Map(); // ts file -> [set, [[line, object id]...]]
  sets.forEach((s, si) => {
    if (!s.objs.length) return;
    const imports = new Set();
    const body = [];
    const spans = [];
    s.objs.forEach((o, i) => {
      if (ferry.CRDS.has(`${o.apiVersion} ${o.kind}`)) return; // no types: checked in rules
      const mod = TYPES[o.kind];
      if (!mod) {
        s.errors.push({ validator: "tsc", msg: `${id(o)}: kind '${o.kind}' has no type in the TYPES table` });
        return;
      }
      imports.add(`import type { ${o.kind} } from "kubernetes-types/${mod}";`);
      spans.push([body.length, id(o)]);
      body.push(...`export const o${i}: ${o.kind} = ${JSON.stringify(o, null, 2)};`.split("\n"));
    });
    const f = path.join(OUT, "ts", `set${si}.ts`);
    fs.writeFileSync(f, [...imports, ...body].join("\n") + "\n");
    fileSet.set(f, [s, spans.map(([n, who]) => [n + imports.size + 1, who])]);
  });
  if (!fileSet.size) return;
  fs.writeFileSync(path.join(OUT, "ts", "tsconfig.json"), JSON.stringify({
    compilerOptions: {
      strict: true, noEmit: true, types: [], lib: ["es2020"], target: "es2020",
      module: "es2020", moduleResolution: "node", skipLibCheck: true,
      typeRoots: [],
    },
    files: [...fileSet.keys()].map((f) => path.basename(f)),
  }));
  const r = spawnSync(process.execPath,
    [require.resolve("typescript/lib/tsc.js"), "-p", path.join(OUT, "ts"), "--pretty", "false"],
    { encoding: "utf8" });
  const out = r.stdout + r.stderr;
  let matched = 0;
  for (const line of out.split("\n")) {
    const m = /^(.+?\.ts)\((\d+),(\d+)\): (error .*)$/.exec(line);
    if (!m) continue;
    const f = path.resolve(path.join(OUT, "ts"), m[1]);
    const entry = fileSet.get(f) ?? fileSet.get(path.resolve(m[1]));
    if (!entry) continue;
    const [s, spans] = entry;
    const n = +m[2];
    let who = "?";
    for (const [start, name] of spans) if (start <= n) who = name;
    s.errors.push({ validator: "tsc", msg: `${who} (line ${n}): ${m[4]}` });
    matched++;
  }
  if (r.status !== 0 && !matched) throw new Error(`tsc failed:\n${out}`);
}

// ---------------------------------------------------------------- schema
function schema(sets) {
  for (const s of sets) for (const o of s.objs) {
    if (ferry.CRDS.has(`${o.apiVersion} ${o.kind}`)) continue; // no schema: checked in rules
    const [group, version] = (o.apiVersion ?? "").includes("/") ? o.apiVersion.split("/") : ["", o.apiVersion];
    const dir = group === "" ? version : `${group}/${version}`;
    let Model;
    try {
      Model = require(`kubernetes-models/${dir}/${o.kind}`)[o.kind];
    } catch {
      Model = undefined;
    }
    if (!Model) {
      s.errors.push({ validator: "schema", msg: `${id(o)}: no schema for ${o.apiVersion} ${o.kind}` });
      continue;
    }
    try {
      new Model(o).validate();
    } catch (e) {
      const errs = e.errors ?? [{ instancePath: "", message: e.message }];
      for (const er of errs)
        if (er.keyword !== "oneOf") // the branch errors say why
          s.errors.push({ validator: "schema", msg: `${id(o)}: ${er.instancePath || "/"} ${er.message}` });
    }
  }
}

// ---------------------------------------------------------------- rules
// Ferry's own tables (ferry.mjs): options from --help of a build, the
// HTTP endpoints and the metric families from the sources.
const FACTS = {
  options: ferry.options(path.resolve(REPO, process.env.FERRY_BUILD_DIR ?? "build")),
  endpoints: ferry.endpoints(REPO),
  ...ferry.metrics(REPO),
};

function rules(s) {
  const err = (msg) => s.errors.push({ validator: "rules", msg });
  const byKind = (k) => s.objs.filter((o) => o.kind === k);
  const configMaps = new Map(byKind("ConfigMap").map((o) => [o.metadata?.name, o]));
  const services = byKind("Service");
  const workloads = s.objs.filter((o) => podSpecOf(o) && o.kind !== "Pod");
  const matches = (sel, labels) => Object.entries(sel ?? {}).every(([k, v]) => labels?.[k] === v);

  for (const o of workloads) {
    const spec = podSpecOf(o);
    const labels = podLabelsOf(o);
    const sel = o.spec?.selector;
    // selector matches template labels (a Job's is generated unless manualSelector)
    if (o.kind !== "Job" || sel) {
      if (!sel?.matchLabels || !Object.keys(sel.matchLabels).length)
        err(`${id(o)}: spec.selector.matchLabels is empty`);
      else if (!matches(sel.matchLabels, labels))
        err(`${id(o)}: selector ${JSON.stringify(sel.matchLabels)} does not match template labels ${JSON.stringify(labels)}`);
    }
    // Deployments, StatefulSets and DaemonSets restart their pods always
    // (the API server refuses anything else there).
    if (["Deployment", "StatefulSet", "DaemonSet"].includes(o.kind) &&
        spec.restartPolicy !== undefined && spec.restartPolicy !== "Always")
      err(`${id(o)}: restartPolicy must be Always (unset), not ${spec.restartPolicy}`);
    if (o.kind === "Job") {
      const rp = spec.restartPolicy;
      if (rp !== "Never" && rp !== "OnFailure")
        err(`${id(o)}: a Job's restartPolicy must be Never or OnFailure, not ${rp ?? "unset (Always)"}`);
      if (o.spec.completionMode === "Indexed") {
        if (!Number.isInteger(o.spec.completions) || o.spec.completions < 1)
          err(`${id(o)}: an Indexed Job must set completions`);
        else if (o.spec.parallelism !== o.spec.completions)
          err(`${id(o)}: Indexed Job: parallelism (${o.spec.parallelism}) must equal completions (${o.spec.completions}); every rank runs at once`);
      }
    }
    if (o.kind === "StatefulSet" || spec.subdomain) {
      const name = o.kind === "StatefulSet" ? o.spec.serviceName : spec.subdomain;
      const what = o.kind === "StatefulSet" ? "serviceName" : "subdomain";
      const svc = services.find((v) => v.metadata?.name === name);
      if (!svc) err(`${id(o)}: ${what} '${name}' names no Service`);
      else if (svc.spec?.clusterIP !== "None") err(`${id(o)}: ${what} '${name}' is not a headless Service (clusterIP: None)`);
      else if (!matches(svc.spec?.selector, labels)) err(`${id(o)}: headless Service '${name}' does not select its pods`);
    }
    // ps-server and the trainer read every FERRY_<NAME> variable
    const usesFerryEnv = (c) => ["ps-server", "trainer"].includes(path.basename(String(c.command?.[0] ?? ""))) ||
      (c.envFrom ?? []).some((e) => e.configMapRef) ||
      (c.env ?? []).some((e) => e.name?.startsWith("FERRY_"));
    const longRunning = o.kind !== "Job" && o.kind !== "CronJob";
    for (const c of containersOf(o)) {
      const cid = `${id(o)} container ${c.name}`;
      // ConfigMap references resolve
      for (const e of c.envFrom ?? [])
        if (e.configMapRef && !e.configMapRef.optional && !configMaps.has(e.configMapRef.name))
          err(`${cid}: envFrom configMapRef '${e.configMapRef.name}' names no ConfigMap`);
      for (const e of c.env ?? []) {
        const r = e.valueFrom?.configMapKeyRef;
        if (!r || r.optional) continue;
        const cm = configMaps.get(r.name);
        if (!cm) err(`${cid}: env ${e.name} configMapKeyRef '${r.name}' names no ConfigMap`);
        else if (!(r.key in (cm.data ?? {}))) err(`${cid}: env ${e.name}: ConfigMap '${r.name}' has no key '${r.key}'`);
      }
      // named ports used by probes exist
      const names = new Set((c.ports ?? []).map((p) => p.name).filter(Boolean));
      for (const pk of ["readinessProbe", "livenessProbe", "startupProbe"]) {
        const p = c[pk];
        const port = p?.tcpSocket?.port ?? p?.httpGet?.port ?? p?.grpc?.port;
        if (typeof port === "string" && !names.has(port))
          err(`${cid}: ${pk} port '${port}' is not a named port of the container`);
      }
      // resources: requests and limits for cpu and memory; extended
      // resources (nvidia.com/gpu) with requests == limits
      const req = c.resources?.requests ?? {}, lim = c.resources?.limits ?? {};
      for (const r of ["cpu", "memory"]) {
        if (!(r in req)) err(`${cid}: no resources.requests.${r}`);
        if (!(r in lim)) err(`${cid}: no resources.limits.${r}`);
      }
      for (const r of new Set([...Object.keys(req), ...Object.keys(lim)])) {
        if (!r.includes("/")) continue;
        if (String(req[r]) !== String(lim[r]))
          err(`${cid}: ${r} requests (${req[r] ?? "unset"}) must equal limits (${lim[r] ?? "unset"})`);
      }
      if (longRunning && c.ports?.length && !(spec.initContainers ?? []).includes(c)) {
        if (!c.readinessProbe) err(`${cid}: no readinessProbe`);
        if (!c.livenessProbe) err(`${cid}: no livenessProbe`);
      }
      // Services named ferry-* inject FERRY_*_SERVICE_HOST/..._PORT; they
      // would share ps-server's FERRY_<NAME> namespace.
      if (usesFerryEnv(c) && spec.enableServiceLinks !== false)
        err(`${cid}: reads FERRY_* settings but its pod does not set enableServiceLinks: false`);
    }
    for (const v of spec.volumes ?? [])
      if (v.configMap && !v.configMap.optional && !configMaps.has(v.configMap.name))
        err(`${id(o)}: volume ${v.name}: configMap '${v.configMap.name}' names no ConfigMap`);
  }

  // Services select some pods, and their named targetPorts exist there
  for (const svc of services) {
    const sel = svc.spec?.selector;
    if (!sel) continue;
    const pods = workloads.filter((o) => matches(sel, podLabelsOf(o)));
    if (!pods.length) { err(`${id(svc)}: selector ${JSON.stringify(sel)} selects no pod template`); continue; }
    for (const p of svc.spec.ports ?? []) {
      if (typeof p.targetPort !== "string") continue;
      for (const o of pods)
        if (!containersOf(o).some((c) => (c.ports ?? []).some((cp) => cp.name === p.targetPort)))
          err(`${id(svc)}: targetPort '${p.targetPort}' is not a named port of ${id(o)}`);
    }
  }

  ferry.ferryRules({ err, podSpecOf, podLabelsOf, containersOf, matches, configMaps, services,
    workloads, byKind, id }, FACTS);
}

// ---------------------------------------------------------------- dashboard
function dashboards(s) {
  if (s.dashboards && !s.dashboards.length) s.errors.push({ validator: "dashboard", msg: "no *.json dashboard" });
  for (const f of s.dashboards ?? [])
    for (const msg of ferry.dashboardProblems(fs.readFileSync(f, "utf8"), FACTS))
      s.errors.push({ validator: "dashboard", msg: `${rel(f)}: ${msg}` });
}

// ---------------------------------------------------------------- kustomize
function kubectlKustomize(sets) {
  if (process.env.FERRY_K8S_KUBECTL === "0") return "disabled (FERRY_K8S_KUBECTL=0)";
  const probe = spawnSync("kubectl", ["kustomize", path.join(K8S, "overlays", "cpu")], { encoding: "utf8" });
  if (probe.error || probe.status !== 0) return "not available (our renderer only)";
  const canon = (objs) => JSON.stringify(objs.map((o) => sortKeys(o)).sort((a, b) =>
    id(a) < id(b) ? -1 : id(a) > id(b) ? 1 : 0));
  for (const s of sets) {
    // bad cases too: a planted error must not hide a renderer difference
    if (!fs.statSync(s.src).isDirectory() || s.dashboards || (s.bad && !s.objs.length)) continue;
    const r = spawnSync("kubectl", ["kustomize", s.src], { encoding: "utf8" });
    if (r.status !== 0) { s.errors.push({ validator: "kustomize", msg: r.stderr.trim() }); continue; }
    const theirs = YAML.parseAllDocuments(r.stdout).map((d) => d.toJS()).filter(Boolean);
    if (canon(theirs) !== canon(s.objs))
      s.errors.push({ validator: "kustomize", msg: "kubectl kustomize renders differently from validate.mjs's renderer" });
  }
  return "compared";
}
function sortKeys(v) {
  if (Array.isArray(v)) return v.map(sortKeys);
  if (v && typeof v === "object")
    return Object.fromEntries(Object.keys(v).sort().map((k) => [k, sortKeys(v[k])]));
  return v;
}

// ---------------------------------------------------------------- main
const t0 = Date.now();
fs.mkdirSync(OUT, { recursive: true });
const sets = loadSets();
yamllint(sets);
tsc(sets);
schema(sets);
for (const s of sets) if (s.objs.length) rules(s);
for (const s of sets) dashboards(s);
const kz = kubectlKustomize(sets);

// keep the rendered good sets for inspection
for (const s of sets)
  if (!s.bad && s.objs.length)
    fs.writeFileSync(path.join(OUT, s.name.replace("/", "-") + ".yaml"),
      s.objs.map((o) => YAML.stringify(o)).join("---\n"));

let failed = 0;
for (const s of sets) {
  if (!s.bad) {
    if (s.errors.length) {
      failed++;
      console.log(`FAIL ${s.name}: ${s.errors.length} problem(s)`);
      for (const e of s.errors) console.log(`  ${e.validator}: ${e.msg}`);
    } else if (s.dashboards) {
      console.log(`ok   ${s.name}: ${s.dashboards.map(rel).join(", ")}`);
    } else {
      console.log(`ok   ${s.name}: ${s.objs.length} objects (${s.objs.map(id).join(", ")})`);
    }
    continue;
  }
  if (s.skip) { console.log(`skip ${s.name}: needs a build (FERRY_BUILD_DIR)`); continue; }
  const unmet = s.expect.filter((x) => !s.errors.some((e) => e.validator === x.validator && e.msg.includes(x.text)));
  const renderDiff = s.errors.filter((e) => e.validator === "kustomize");
  if (!unmet.length && !renderDiff.length) {
    const by = [...new Set(s.expect.map((x) => x.validator))].join(", ");
    console.log(`ok   ${s.name}: rejected by ${by}`);
    if (VERBOSE) for (const e of s.errors) console.log(`       ${e.validator}: ${e.msg}`);
  } else {
    failed++;
    console.log(`FAIL ${s.name}: ${unmet.length ? "not rejected as expected" : "renderers disagree"}`);
    for (const x of unmet) console.log(`  missing: ${x.validator} '${x.text}'`);
    for (const e of s.errors) console.log(`  got ${e.validator}: ${e.msg}`);
    if (!s.errors.length) console.log("  got: no error at all");
  }
}
console.log(`k8s-validate: ${sets.length} sets, ${failed} failed; kubectl kustomize: ${kz}; ` +
  `option check: ${FACTS.options.skip ? `skipped (${FACTS.options.skip})` : "against --help"}; ` +
  `${FACTS.endpoints.size} endpoints, ${FACTS.names.size} metric families; ${((Date.now() - t0) / 1000).toFixed(1)} s`);
process.exit(failed ? 1 : 0);
