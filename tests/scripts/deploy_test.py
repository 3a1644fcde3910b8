#!/usr/bin/python3
"""The container image recipe (Dockerfile) and the Kubernetes manifests
(deploy/kubernetes) agree with each other and with the build.

Every manifest parses and has a known kind; in the plain form the roles,
counts, port, scheduler name, image, token Secret and programs agree across
the scheduler, the servers and the workers; the MXJob leaves the DMLC_*
variables to the training-operator and gives it what it needs; the
Dockerfile builds from Debian bookworm's packages only, and the programs the
manifests and the image run are ones the CMake install rules (or the
Dockerfile itself) put in the image.

The manifests need Debian's python3-yaml. Without it the test prints why and
exits 77, which CTest reports as skipped (the Dockerfile's checks still run
first and fail the test if they fail)."""

import os
import posixpath
import re
import shlex
import sys
import unittest

sys.dont_write_bytecode = True  # No __pycache__ in the source tree.

try:
    import yaml
except ImportError:
    yaml = None

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
DEPLOY = os.path.join(ROOT, "deploy", "kubernetes")
NO_YAML = "python3-yaml is not installed (apt-get install python3-yaml)"

KNOWN_KINDS = {
    ("v1", "Service"), ("v1", "Secret"), ("v1", "ConfigMap"),
    ("batch/v1", "Job"), ("apps/v1", "Deployment"),
    ("apps/v1", "StatefulSet"), ("kubeflow.org/v1", "MXJob"),
    ("kustomize.config.k8s.io/v1beta1", "Kustomization"),
}
ROLES = ("scheduler", "server", "worker")
# Where a pod's index within its role comes from, by the kind that starts it.
INDEX_FIELDS = {
    "Job": "metadata.annotations['batch.kubernetes.io/job-completion-index']",
    "StatefulSet": "metadata.labels['apps.kubernetes.io/pod-index']",
    "MXJob": "metadata.labels['training.kubeflow.org/replica-index']",
}
# What Kubeflow's training-operator gives every MXJob container named
# "mxnet" (pkg/controller.v1/mxnet/mxnet.go up to its v1.8 releases).
OPERATOR_ENV = {"DMLC_ROLE", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT",
                "DMLC_NUM_SERVER", "DMLC_NUM_WORKER", "DMLC_USE_KUBERNETES"}
# The shared libraries the programs link (CMakeLists.txt's find_package and
# pkg_check_modules), as bookworm packages them.
RUNTIME_PACKAGES = {"libzmq5", "libprotobuf32", "libgoogle-glog0v6",
                    "libgflags2.2"}
# Programs that come from a Debian package the runtime stage installs.
PACKAGED_PROGRAMS = {"/usr/bin/tini": "tini"}


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def skip_reason(reason):
    print("SKIP deploy: " + reason, file=sys.stderr)
    return reason


# --- The Dockerfile ---------------------------------------------------------

def dockerfile_instructions(text):
    """[(INSTRUCTION, arguments)] with continuations joined and comments
    dropped, in order."""
    out, pending = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # A comment inside a continued instruction.
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = (pending + stripped).strip()
        pending = ""
        if full:
            word, _, rest = full.partition(" ")
            out.append((word.upper(), rest.strip()))
    if pending.strip():
        raise ValueError("Dockerfile ends inside a continued line")
    return out


class Stage:
    def __init__(self, image, name):
        self.image, self.name = image, name
        self.instructions = []

    def args(self, word):
        return [a for w, a in self.instructions if w == word]


def dockerfile_stages(text):
    stages = []
    for word, args in dockerfile_instructions(text):
        if word == "FROM":
            m = re.match(r"(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?$",
                         args, re.I)
            if not m:
                raise ValueError("cannot read FROM " + args)
            stages.append(Stage(m.group(1), m.group(2)))
        elif not stages:
            if word != "ARG":
                raise ValueError(word + " before the first FROM")
        else:
            stages[-1].instructions.append((word, args))
    return stages


def exec_form(args):
    """The argv of an exec-form ENTRYPOINT/CMD (a JSON array), else the
    shell form as /bin/sh -c would run it."""
    args = args.strip()
    if args.startswith("["):
        import json
        return json.loads(args)
    return ["/bin/sh", "-c", args]


def apt_packages(run):
    """The packages named by every `apt-get install` in a RUN command."""
    packages = []
    for command in re.split(r"&&|;|\|\|", run):
        words = shlex.split(command)
        while words and "=" in words[0]:
            words = words[1:]  # VAR=value prefixes.
        if words[:2] == ["apt-get", "install"]:
            packages += [w for w in words[2:] if not w.startswith("-")]
    return packages


def cmake_executables():
    """Target names of every add_executable in the tree's CMake files."""
    names = set()
    for base, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith((".", "build"))]
        if "CMakeLists.txt" in files:
            with open(os.path.join(base, "CMakeLists.txt")) as f:
                names.update(re.findall(r"add_executable\(\s*([A-Za-z0-9_]+)",
                                        f.read()))
    return names


def cmake_installed_programs():
    """Paths relative to the install prefix of the programs the top-level
    CMakeLists.txt's install() rules put in ${CMAKE_INSTALL_BINDIR} (bin)."""
    text = read("CMakeLists.txt")
    executables = cmake_executables()
    programs = set()
    for body in re.findall(r"\binstall\(([^)]*)\)", text):
        words = body.split()
        if not words or "${CMAKE_INSTALL_BINDIR}" not in words:
            continue
        if words[0] == "TARGETS":
            for target in words[1:]:
                if target.isupper():
                    break  # EXPORT, RUNTIME, ... end the target list.
                if target in executables:
                    programs.add("bin/" + target)
        elif words[0] == "PROGRAMS":
            name = posixpath.basename(words[1])
            if "RENAME" in words:
                name = words[words.index("RENAME") + 1]
            programs.add("bin/" + name)
    return programs


class Image:
    """What the Dockerfile builds, read from it and from the install rules."""

    def __init__(self, text):
        self.stages = dockerfile_stages(text)
        final = self.stages[-1]
        self.entrypoint = [exec_form(a) for a in final.args("ENTRYPOINT")]
        self.cmd = [exec_form(a) for a in final.args("CMD")]
        self.user = (final.args("USER") or [None])[-1]
        self.runtime_packages = [p for run in final.args("RUN")
                                 for p in apt_packages(run)]
        self.programs = self._programs()

    def stage(self, name):
        return next((s for s in self.stages if s.name == name), None)

    def _programs(self):
        """Absolute paths of the programs the final stage holds: the install
        tree copied from a build stage (CMake's rules plus what that stage
        put into the tree's bin itself), and those of packages it installs."""
        programs = {p for p, pkg in PACKAGED_PROGRAMS.items()
                    if pkg in self.runtime_packages}
        for copy in self.stages[-1].args("COPY"):
            m = re.match(r"--from=(\S+)\s+(\S+)\s+(\S+)$", copy)
            if not m:
                continue
            build = self.stage(m.group(1))
            source, dest = m.group(2).rstrip("/"), m.group(3).rstrip("/")
            for run in build.args("RUN") if build else []:
                if not re.search(r"cmake --install \S+ --prefix " +
                                 re.escape(source) + r"(\s|$)", run):
                    continue
                relative = set(cmake_installed_programs())
                # Files the stage installs into the tree itself.
                for target in re.findall(
                        r"install -m 0?755 \S+ " + re.escape(source) +
                        r"/(bin/\S+)", run):
                    relative.add(target)
                programs.update(dest + "/" + p for p in relative)
        return programs

    def argv(self, command=None, args=None):
        """The argv a container runs, by Kubernetes' rules: command replaces
        ENTRYPOINT (and drops CMD), args replaces CMD."""
        entrypoint = self.entrypoint[-1] if self.entrypoint else []
        cmd = self.cmd[-1] if self.cmd else []
        if command:
            return list(command) + list(args or [])
        return entrypoint + list(args if args is not None else cmd)

    def program(self, argv):
        """The program tini (or none) runs: the first word after it."""
        if argv and argv[0] in PACKAGED_PROGRAMS:
            rest = argv[1:]
            if rest and rest[0] == "--":
                rest = rest[1:]
            return rest[0] if rest else None
        return argv[0] if argv else None


def image():
    return Image(read("Dockerfile"))


class DockerfileTest(unittest.TestCase):
    def setUp(self):
        self.image = image()

    def test_every_stage_is_debian_bookworm(self):
        self.assertGreaterEqual(len(self.image.stages), 2,
                                "a build stage and a runtime stage")
        for stage in self.image.stages:
            self.assertIn(stage.image, ("debian:bookworm",
                                        "debian:bookworm-slim"))

    def test_only_debian_packages_are_fetched(self):
        for stage in self.image.stages:
            self.assertEqual(stage.args("ADD"), [],
                             "ADD can fetch URLs; COPY the tree instead")
            for run in stage.args("RUN"):
                for word in ("curl", "wget", "pip", "pip3", "git", "npm",
                             "go get", "easy_install"):
                    self.assertNotRegex(run, r"(^|[\s;&|(])" + word + r"\b",
                                        "a download outside apt-get")
                if "install" in run and "apt-get install" not in run:
                    self.assertIn("cmake --install", run)

    def test_build_stage_uses_the_packages_deps_sh_installs(self):
        deps = re.search(r"^packages=\(([^)]*)\)", read("scripts/deps.sh"),
                         re.M | re.S)
        self.assertTrue(deps)
        base = set(deps.group(1).split())
        build = [p for stage in self.image.stages[:-1]
                 for run in stage.args("RUN") for p in apt_packages(run)]
        self.assertEqual(sorted(set(build) - base), [],
                         "build packages not in scripts/deps.sh")
        for needed in ("cmake", "pkg-config", "libzmq3-dev", "libprotobuf-dev",
                       "protobuf-compiler", "libgoogle-glog-dev",
                       "libgflags-dev"):
            self.assertIn(needed, build)

    def test_build_is_optimised_without_tests(self):
        self.assertRegex(read("CMakeLists.txt"),
                         r'option\(EMBER_BUILD_TESTS\b')
        runs = " ".join(run for stage in self.image.stages[:-1]
                        for run in stage.args("RUN"))
        self.assertRegex(runs, r"-DCMAKE_BUILD_TYPE=(Release|RelWithDebInfo)\b")
        self.assertIn("-DEMBER_BUILD_TESTS=OFF", runs)
        for target in re.findall(r"--target ((?:[\w-]+ ?)+)", runs)[0].split():
            self.assertIn(target, cmake_executables() | {"ps"})

    def test_runtime_stage_has_the_libraries_and_no_build_tools(self):
        packages = set(self.image.runtime_packages)
        self.assertEqual(sorted(RUNTIME_PACKAGES - packages), [])
        for p in packages:
            self.assertFalse(p.endswith("-dev") or p in ("cmake",
                                                        "build-essential"),
                             p + " in the runtime stage")

    def test_runs_as_a_numeric_non_root_user(self):
        self.assertIsNotNone(self.image.user)
        uid = self.image.user.split(":")[0]
        self.assertRegex(uid, r"^\d+$", "runAsNonRoot needs a numeric USER")
        self.assertNotEqual(int(uid), 0)

    def test_the_image_installs_the_scheduler_and_the_ctr_example(self):
        self.assertIn("bin/ember_scheduler", cmake_installed_programs())
        self.assertIn("/usr/local/bin/ember_scheduler", self.image.programs)
        self.assertIn("/usr/local/bin/ctr_train", self.image.programs)

    def test_its_default_program_is_installed(self):
        argv = self.image.argv()
        self.assertIn(self.image.program(argv), self.image.programs, argv)

    def test_the_context_leaves_out_build_trees(self):
        ignored = read(".dockerignore").split()
        self.assertIn(".git", ignored)
        self.assertIn("build*", ignored)


# --- The manifests ----------------------------------------------------------

def manifest_files():
    found = []
    for base, _, files in os.walk(DEPLOY):
        found += [os.path.join(base, f) for f in sorted(files)
                  if f.endswith((".yaml", ".yml"))]
    return sorted(found)


def load(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def env_of(container):
    """{name: value or ('fieldRef', path) or ('valueFrom', ...)}."""
    env = {}
    for e in container.get("env") or []:
        if "value" in e:
            env[e["name"]] = str(e["value"])
        elif "fieldRef" in (e.get("valueFrom") or {}):
            env[e["name"]] = ("fieldRef", e["valueFrom"]["fieldRef"]["fieldPath"])
        else:
            env[e["name"]] = ("valueFrom", e.get("valueFrom"))
    return env


class Pod:
    """One pod template: who starts it, how many, and its main container."""

    def __init__(self, path, kind, name, template, replicas, index_kind):
        self.path = os.path.relpath(path, ROOT)
        self.kind, self.name = kind, name
        self.template, self.replicas = template, replicas
        self.index_kind = index_kind
        self.spec = template.get("spec") or {}
        self.containers = self.spec.get("containers") or []
        self.env = env_of(self.containers[0]) if self.containers else {}

    def where(self):
        return "%s: %s %s" % (self.path, self.kind, self.name)


def pods(docs_by_path):
    """Every pod template, from workloads and MXJob replica specs."""
    out = []
    for path, docs in docs_by_path.items():
        for d in docs:
            kind, meta = d.get("kind"), d.get("metadata") or {}
            spec = d.get("spec") or {}
            if kind == "Job":
                count = spec.get("completions", 1)
                out.append(Pod(path, kind, meta.get("name"), spec["template"],
                               count, "Job"))
            elif kind in ("Deployment", "StatefulSet"):
                out.append(Pod(path, kind, meta.get("name"), spec["template"],
                               spec.get("replicas", 1), kind))
            elif kind == "MXJob":
                for rtype, rspec in (spec.get("mxReplicaSpecs") or {}).items():
                    out.append(Pod(path, "MXJob", "%s/%s" % (meta.get("name"),
                                                             rtype),
                                   rspec["template"], rspec.get("replicas", 1),
                                   "MXJob"))
    return out


class ManifestTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if yaml is None:
            raise unittest.SkipTest(skip_reason(NO_YAML))
        cls.image = image()
        cls.files = manifest_files()
        cls.docs = {p: load(p) for p in cls.files}
        cls.plain_dir = os.path.join(DEPLOY, "plain")
        cls.plain = [p for p in pods(cls.docs)
                     if p.path.startswith("deploy/kubernetes/plain/")]
        cls.mxjobs = [d for docs in cls.docs.values() for d in docs
                      if d.get("kind") == "MXJob"]
        cls.all_pods = pods(cls.docs)

    def by_role(self, role):
        return [p for p in self.plain if p.env.get("DMLC_ROLE") == role]

    def test_there_are_both_forms(self):
        self.assertTrue(self.files)
        self.assertEqual(len(self.mxjobs), 1, "one MXJob")
        self.assertTrue(self.plain, "a plain form under deploy/kubernetes/plain")

    def test_every_document_has_a_known_kind(self):
        for path, docs in self.docs.items():
            self.assertTrue(docs, path + " is empty")
            for d in docs:
                self.assertIsInstance(d, dict, path)
                self.assertIn((d.get("apiVersion"), d.get("kind")), KNOWN_KINDS,
                              path)
                if d["kind"] != "Kustomization":
                    self.assertTrue((d.get("metadata") or {}).get("name"), path)
                # A token's value never goes into the repository.
                self.assertNotEqual(d["kind"], "Secret",
                                    path + ": make the Secret with kubectl")

    def test_kustomizations_list_every_manifest_beside_them(self):
        kustomizations = [p for p in self.files
                          if posixpath.basename(p) == "kustomization.yaml"]
        self.assertEqual(len(kustomizations), 2)
        for path in kustomizations:
            (k,) = self.docs[path]
            here = os.path.dirname(path)
            beside = sorted(posixpath.basename(p) for p in self.files
                            if os.path.dirname(p) == here and p != path)
            self.assertEqual(sorted(k["resources"]), beside, path)

    def test_one_image_everywhere(self):
        images = {c["image"] for p in self.all_pods for c in p.containers}
        self.assertEqual(len(images), 1, images)
        (image_ref,) = images
        name, _, tag = image_ref.rpartition(":")
        version = re.search(r"project\(Ember VERSION (\S+)",
                            read("CMakeLists.txt")).group(1)
        self.assertEqual(tag, version, "the image of this version")
        for path, docs in self.docs.items():
            for d in docs:
                for entry in d.get("images") or []:
                    self.assertEqual((entry["name"], entry.get("newName"),
                                      str(entry.get("newTag"))),
                                     (name, name, tag), path)

    def test_programs_are_installed_in_the_image(self):
        for p in self.all_pods:
            for c in p.containers:
                argv = self.image.argv(c.get("command"), c.get("args"))
                program = self.image.program(argv)
                self.assertIn(program, self.image.programs,
                              "%s runs %s" % (p.where(), argv))
                # A compiled program: the image has no Python for
                # ember-launch, and a pod needs no launcher.
                self.assertIn(posixpath.basename(program), cmake_executables(),
                              p.where())
                role = p.env.get("DMLC_ROLE") or p.name.split("/")[-1].lower()
                if role == "worker":
                    self.assertTrue(program.endswith("/ctr_train"), p.where())

    def test_pods_run_as_the_image_user_with_a_writable_scratch(self):
        uid = int(self.image.user.split(":")[0])
        for p in self.all_pods:
            security = p.spec.get("securityContext") or {}
            self.assertEqual(security.get("runAsUser"), uid, p.where())
            self.assertTrue(security.get("runAsNonRoot"), p.where())
            for c in p.containers:
                mounts = {m["mountPath"]: m["name"]
                          for m in c.get("volumeMounts") or []}
                volumes = {v["name"]: v for v in p.spec.get("volumes") or []}
                read_only = (c.get("securityContext") or {}).get(
                    "readOnlyRootFilesystem")
                for arg in c.get("args") or []:
                    m = re.match(r"--(?:out_dir|checkpoint_dir)=(.+)", arg)
                    if m and read_only:
                        writable = [path for path, v in mounts.items()
                                    if "emptyDir" in volumes[v]
                                    and (m.group(1) + "/").startswith(
                                        path.rstrip("/") + "/")]
                        self.assertTrue(writable, "%s writes %s" %
                                        (p.where(), m.group(1)))

    def test_the_token_comes_from_one_secret_mounted_as_a_file(self):
        secrets = set()
        for p in self.all_pods:
            self.assertNotIn("EMBER_CLUSTER_TOKEN", p.env,
                             p.where() + ": the token belongs in a file")
            token_file = p.env.get("EMBER_CLUSTER_TOKEN_FILE")
            self.assertIsInstance(token_file, str, p.where())
            volumes = {v["name"]: v for v in p.spec.get("volumes") or []}
            found = None
            for m in p.containers[0].get("volumeMounts") or []:
                secret = (volumes.get(m["name"]) or {}).get("secret")
                if secret is None:
                    continue
                mount = m["mountPath"].rstrip("/")
                if "subPath" in m:
                    if mount != token_file:
                        continue
                    file_name = m["subPath"]
                elif posixpath.dirname(token_file) == mount:
                    file_name = posixpath.basename(token_file)
                else:
                    continue
                keys = {i["path"]: i["key"] for i in secret.get("items") or []}
                if secret.get("items") and file_name not in keys:
                    continue
                found = (secret["secretName"], keys.get(file_name, file_name))
            self.assertIsNotNone(found, "%s: no Secret mounted at %s" %
                                 (p.where(), token_file))
            secrets.add(found)
        self.assertEqual(len(secrets), 1, secrets)
        (name, key), = secrets
        command = "kubectl create secret generic %s --from-file=%s=" % (name,
                                                                         key)
        self.assertTrue(command in read("deploy/kubernetes/README.md"),
                        "deploy/kubernetes/README.md makes the Secret the "
                        "pods mount: " + command)

    def test_plain_form_has_each_role_and_counts_that_match(self):
        schedulers = self.by_role("scheduler")
        servers, workers = self.by_role("server"), self.by_role("worker")
        self.assertEqual(len(schedulers), 1, "one scheduler workload")
        self.assertEqual(schedulers[0].replicas, 1)
        self.assertTrue(servers and workers)
        self.assertEqual(sorted({p.env.get("DMLC_ROLE") for p in self.plain}),
                         sorted(ROLES), "every pod names one of the roles")
        num_servers = sum(p.replicas for p in servers)
        num_workers = sum(p.replicas for p in workers)
        for p in self.plain:
            self.assertEqual(p.env.get("DMLC_NUM_SERVER"), str(num_servers),
                             p.where() + ": DMLC_NUM_SERVER vs the servers' "
                             "completions")
            self.assertEqual(p.env.get("DMLC_NUM_WORKER"), str(num_workers),
                             p.where() + ": DMLC_NUM_WORKER vs the workers' "
                             "completions")
            self.assertEqual(p.env.get("DMLC_USE_KUBERNETES"), "1", p.where())
            labels = p.template.get("metadata", {}).get("labels") or {}
            self.assertEqual(labels.get("app.kubernetes.io/component"),
                             p.env["DMLC_ROLE"], p.where())
            if p.kind == "Job":
                spec = self.workload(p)["spec"]
                self.assertEqual(spec.get("parallelism", 1), p.replicas,
                                 p.where() + ": parallelism vs completions")
                self.assertEqual(spec.get("backoffLimit"), 0, p.where())
                self.assertEqual(p.spec.get("restartPolicy"), "Never")

    def workload(self, pod):
        for d in self.docs[os.path.join(ROOT, pod.path)]:
            if d.get("kind") == pod.kind and d["metadata"]["name"] == pod.name:
                return d
        raise AssertionError(pod.where())

    def test_servers_and_workers_ask_for_their_index_as_rank(self):
        for p in self.by_role("server") + self.by_role("worker"):
            self.assertEqual(p.env.get("EMBER_RANK_HINT"),
                             ("fieldRef", INDEX_FIELDS[p.kind]), p.where())
            if p.kind == "Job" and p.replicas > 1:
                self.assertEqual(self.workload(p)["spec"].get("completionMode"),
                                 "Indexed", p.where())

    def test_plain_scheduler_service_port_and_name_agree(self):
        services = [d for p in self.files if p.startswith(self.plain_dir)
                    for d in self.docs[p] if d["kind"] == "Service"]
        self.assertEqual(len(services), 1, "one Service, the scheduler's")
        (service,) = services
        spec = service["spec"]
        self.assertEqual(spec.get("clusterIP"), "None", "a headless Service")
        selector = spec["selector"]
        for p in self.plain:
            labels = p.template.get("metadata", {}).get("labels") or {}
            selected = all(labels.get(k) == v for k, v in selector.items())
            self.assertEqual(selected, p.env["DMLC_ROLE"] == "scheduler",
                             p.where() + " and the Service's selector")
        (port,) = spec["ports"]
        ports = {p.env.get("DMLC_PS_ROOT_PORT") for p in self.plain}
        self.assertEqual(ports, {str(port["port"])},
                         "DMLC_PS_ROOT_PORT vs the Service's port")
        self.assertEqual(port.get("targetPort", port["port"]), port["port"])
        (scheduler,) = self.by_role("scheduler")
        container_ports = [cp["containerPort"]
                           for cp in scheduler.containers[0].get("ports") or []]
        self.assertEqual(container_ports, [port["port"]],
                         "the scheduler container's port")
        name = service["metadata"]["name"]
        for p in self.plain:
            uri = p.env.get("DMLC_PS_ROOT_URI")
            self.assertIsInstance(uri, str, p.where())
            self.assertEqual(uri.split(".")[0], name,
                             p.where() + ": DMLC_PS_ROOT_URI names the Service")

    def test_mxjob_gives_the_operator_what_it_needs(self):
        (job,) = self.mxjobs
        self.assertEqual(job["apiVersion"], "kubeflow.org/v1")
        spec = job["spec"]
        self.assertEqual(spec.get("jobMode", "MXTrain"), "MXTrain")
        replicas = spec["mxReplicaSpecs"]
        self.assertEqual(sorted(replicas), ["Scheduler", "Server", "Worker"])
        self.assertEqual(replicas["Scheduler"].get("replicas", 1), 1)
        ports = set()
        for rtype, rspec in replicas.items():
            self.assertIn(rspec.get("restartPolicy", "Never"),
                          ("Always", "OnFailure", "Never", "ExitCode"))
            containers = rspec["template"]["spec"]["containers"]
            mxnet = [c for c in containers if c["name"] == "mxnet"]
            self.assertEqual(len(mxnet), 1,
                             rtype + ": the operator configures the container "
                             "named mxnet")
            set_here = set(env_of(mxnet[0])) & OPERATOR_ENV
            self.assertEqual(sorted(set_here), [],
                             rtype + ": the operator sets these itself")
            named = [p["containerPort"] for p in mxnet[0].get("ports") or []
                     if p.get("name") == "mxjob-port"]
            self.assertEqual(len(named), 1, rtype + ": a port named mxjob-port")
            ports.update(named)
            if rtype in ("Server", "Worker"):
                self.assertEqual(env_of(mxnet[0]).get("EMBER_RANK_HINT"),
                                 ("fieldRef", INDEX_FIELDS["MXJob"]), rtype)
        self.assertEqual(len(ports), 1, "one mxjob-port number: %s" % ports)

    def test_every_pod_waits_alike_for_the_job_to_form(self):
        timeouts = {p.env.get("EMBER_START_TIMEOUT") for p in self.all_pods}
        self.assertEqual(len(timeouts), 1, timeouts)

    def test_readme_applies_each_kustomization(self):
        readme = read("deploy/kubernetes/README.md")
        for path in self.files:
            if posixpath.basename(path) == "kustomization.yaml":
                command = "kubectl apply -k " + os.path.relpath(
                    os.path.dirname(path), ROOT)
                self.assertTrue(command in readme, "README.md: " + command)
        self.assertTrue("docker build -t %s ." % self.image_ref() in readme)

    def image_ref(self):
        return next(c["image"] for p in self.all_pods for c in p.containers)

if __name__ == "__main__":
    result = unittest.main(exit=False).result
    if not result.wasSuccessful():
        sys.exit(1)
    if yaml is None:
        print("SKIP deploy: the manifests were not checked: " + NO_YAML,
              file=sys.stderr)
        sys.exit(77)
