"""Pods: scheduling gates and spec.nodeName (pkg/apis/core/validation/validation.go v1.36: ValidatePodCreate,
validateSchedulingGates, validateOnlyDeletedSchedulingGates), binding, status and the create answer."""

from __future__ import annotations

from tests.conformance.support import MERGE, Conn, invalid_message, pod

QUALIFIED_NAME = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)


async def test_node_name_with_scheduling_gates_is_refused_at_create(kube: Conn) -> None:
    reply = await kube.post(
        kube.pods, pod("gated", nodeName="n1", schedulingGates=[{"name": "example.com/wait"}])
    )
    assert reply.status == 422
    error = "spec.nodeName: Forbidden: cannot be set until all schedulingGates have been cleared"
    assert reply.body["message"] == invalid_message("Pod", "gated", error)
    assert reply.body["details"] == {
        "name": "gated",
        "kind": "Pod",
        "causes": [
            {
                "reason": "FieldValueForbidden",
                "message": "Forbidden: cannot be set until all schedulingGates have been cleared",
                "field": "spec.nodeName",
            }
        ],
    }


async def test_scheduling_gate_names_are_qualified_names_without_duplicates(kube: Conn) -> None:
    gates = [{"name": "a/b/c"}, {"name": "x"}, {"name": "x"}, {"name": ""}]
    reply = await kube.post(kube.pods, pod("bad-gates", schedulingGates=gates))
    assert reply.status == 422
    # IsQualifiedName's words for a bad prefixed name: "a qualified name" in v1.34, "a valid label key" since.
    label_key = (
        f"{'a qualified name' if kube.minor <= 34 else 'a valid label key'} must consist of alphanumeric "
        "characters, '-', '_' or '.', and must start and end "
        "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
        "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and "
        "'/' (e.g. 'example.com/MyName')"
    )
    assert reply.causes == [
        ("FieldValueInvalid", "spec.schedulingGates[0]", f'Invalid value: "a/b/c": {label_key}'),
        ("FieldValueDuplicate", "spec.schedulingGates[2]", 'Duplicate value: "x"'),
        ("FieldValueInvalid", "spec.schedulingGates[3]", 'Invalid value: "": name part must be non-empty'),
        ("FieldValueInvalid", "spec.schedulingGates[3]", f'Invalid value: "": {QUALIFIED_NAME}'),
    ]


async def test_scheduling_gates_can_be_removed_but_not_added(kube: Conn) -> None:
    await kube.created(kube.pods, pod("g", schedulingGates=[{"name": "a"}, {"name": "b"}]))
    added = await kube.patch(f"{kube.pods}/g", {"spec": {"schedulingGates": [{"name": "a"}, {"name": "c"}]}})
    assert added.status == 422
    assert added.body["message"] == invalid_message(
        "Pod",
        "g",
        "spec.schedulingGates[1].name: Forbidden: only deletion is allowed, but found new scheduling gate 'c'",
    )
    removed = await kube.patch(f"{kube.pods}/g", {"spec": {"schedulingGates": [{"name": "b"}]}})
    assert removed.status == 200, removed.body
    assert removed.body["spec"]["schedulingGates"] == [{"name": "b"}]
    ungated = await kube.patch(f"{kube.pods}/g", {"spec": {"schedulingGates": None}})
    assert ungated.status == 200, ungated.body
    assert "schedulingGates" not in ungated.body["spec"]
    regated = await kube.patch(f"{kube.pods}/g", {"spec": {"schedulingGates": [{"name": "a"}]}})
    assert regated.status == 422
    assert regated.causes == [
        (
            "FieldValueForbidden",
            "spec.schedulingGates[0].name",
            "Forbidden: only deletion is allowed, but found new scheduling gate 'a'",
        )
    ]


async def test_a_gated_pod_cannot_be_bound(kube: Conn) -> None:
    await kube.created(kube.pods, pod("g", schedulingGates=[{"name": "a"}]))
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "g"}, "target": {"name": "n1"}}
    reply = await kube.post(f"{kube.pods}/g/binding", binding)
    assert reply.status == 409
    assert reply.body["reason"] == "Conflict"
    assert reply.body["message"] == (
        'Operation cannot be fulfilled on pods/binding "g": pod g has non-empty .spec.schedulingGates'
    )


async def test_binding_sets_the_node_once(kube: Conn) -> None:
    await kube.created(kube.pods, pod("p"))
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"}, "target": {"name": "n1"}}
    first = await kube.post(f"{kube.pods}/p/binding", binding)
    assert first.status == 201
    assert first.status_fields() == {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}
    bound = await kube.ok(f"{kube.pods}/p")
    assert bound["spec"]["nodeName"] == "n1"
    scheduled = [c for c in bound["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert [(c["status"], c.get("reason")) for c in scheduled] == [("True", None)]
    again = await kube.post(f"{kube.pods}/p/binding", {**binding, "target": {"name": "n2"}})
    assert again.status == 409
    assert again.body["message"] == (
        'Operation cannot be fulfilled on pods/binding "p": pod p is already assigned to node "n1"'
    )


async def test_node_name_cannot_be_set_by_an_update(kube: Conn) -> None:
    await kube.created(kube.pods, pod("p"))
    reply = await kube.patch(f"{kube.pods}/p", {"spec": {"nodeName": "n1"}})
    assert reply.status == 422
    assert [(reason, field) for reason, field, _ in reply.causes] == [("FieldValueForbidden", "spec")]


async def test_status_update_keeps_the_spec(kube: Conn) -> None:
    await kube.created(kube.pods, pod("p"))
    reply = await kube.patch(
        f"{kube.pods}/p/status",
        {"spec": {"activeDeadlineSeconds": 5}, "status": {"phase": "Running", "message": "hello"}},
        MERGE,
    )
    assert reply.status == 200, reply.body
    assert "activeDeadlineSeconds" not in reply.body["spec"]
    assert (reply.body["status"]["phase"], reply.body["status"]["message"]) == ("Running", "hello")


TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"


async def test_pods_get_the_service_account_token_volume(kube: Conn) -> None:
    """plugin/pkg/admission/serviceaccount/admission.go: mountServiceAccountToken, TokenVolumeSource."""
    created = await kube.created(
        kube.pods, pod("p", initContainers=[{"name": "init", "image": "registry.k8s.io/pause:3.10"}])
    )
    [volume] = created["spec"]["volumes"]
    name = volume["name"]
    assert name.startswith("kube-api-access-") and len(name) == len("kube-api-access-") + 5
    assert volume["projected"] == {
        "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {
                "downwardAPI": {
                    "items": [
                        {
                            "path": "namespace",
                            "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                        }
                    ]
                }
            },
        ],
        "defaultMode": 420,
    }
    mount = {"name": name, "readOnly": True, "mountPath": TOKEN_PATH}
    assert created["spec"]["containers"][0]["volumeMounts"] == [mount]
    assert created["spec"]["initContainers"][0]["volumeMounts"] == [mount]
    assert created["spec"]["serviceAccountName"] == "default"


async def test_no_token_volume_when_the_pod_opts_out_or_mounts_the_path_itself(kube: Conn) -> None:
    opted_out = await kube.created(kube.pods, pod("out", automountServiceAccountToken=False))
    assert "volumes" not in opted_out["spec"]
    assert "volumeMounts" not in opted_out["spec"]["containers"][0]
    own = pod("own", volumes=[{"name": "mine", "emptyDir": {}}])
    own["spec"]["containers"][0]["volumeMounts"] = [{"name": "mine", "mountPath": TOKEN_PATH}]
    created = await kube.created(kube.pods, own)
    assert [v["name"] for v in created["spec"]["volumes"]] == ["mine"]
    assert created["spec"]["containers"][0]["volumeMounts"] == [{"name": "mine", "mountPath": TOKEN_PATH}]


async def test_status_pod_ips_hold_one_ip_per_family(kube: Conn) -> None:
    # validatePodIPs (ValidatePodStatusUpdate): two IPv4 addresses are refused, the bad list printed as the
    # internal core.PodIP structs; one is fine.
    await kube.created(kube.pods, pod("p"))
    two = {"status": {"podIP": "198.18.128.4", "podIPs": [{"ip": "198.18.128.4"}, {"ip": "198.18.128.3"}]}}
    reply = await kube.patch(f"{kube.pods}/p/status", two, MERGE)
    assert reply.status == 422, reply.body
    error = (
        'status.podIPs: Invalid value: [{"IP":"198.18.128.4"},{"IP":"198.18.128.3"}]: '
        "may specify no more than one IP for each IP family"
    )
    assert reply.body["message"] == invalid_message("Pod", "p", error)
    one = {"status": {"podIP": "198.18.128.4", "podIPs": [{"ip": "198.18.128.4"}]}}
    assert (await kube.patch(f"{kube.pods}/p/status", one, MERGE)).status == 200
