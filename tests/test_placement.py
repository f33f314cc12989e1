"""Placement: compute class + capacity -> nodeSelector, tolerations, resources (Gaudi's extras included), size
errors in the developer's terms, and Spot-aware retries whose expressions are evaluated here, not just compared;
and the compiled placement read back (wf.compile.readback)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from wf.argo.defaults import as_run
from wf.compile.interruptions import APPLICATION_EXPRESSION, INTERRUPTION_EXPRESSION, STOPPED_FROM_OUTSIDE
from wf.compile.placement import INTERRUPTION_RETRIES, on_real_nodes, place_step
from wf.compile.readback import CompiledPlacement, node_capacity, read_placement
from wf.compile.workflow import ATTEMPTS_SUFFIX, compile_job
from wf.core.constants import (
    ARCH_LABEL,
    CAPACITIES,
    CAPACITY_LABEL,
    CLASS_LABEL,
    EKS_CAPACITY_LABEL,
    EKS_CAPACITY_VALUES,
    INSTANCE_TYPE_LABEL,
    REAL_NODE_LABEL,
)
from wf.model.catalog import Catalog
from wf.model.nodegroups import node_groups


def place(catalog: Catalog, make_job: Any, step: dict[str, Any], **spec: Any) -> Any:
    job = make_job([{"name": "s", "command": ["x"], **step}], **spec)
    placement, problems = place_step(job, 0, catalog)
    return placement, problems


def placed(catalog: Catalog, make_job: Any, step: dict[str, Any], **spec: Any) -> Any:
    placement, problems = place(catalog, make_job, step, **spec)
    assert problems == [] and placement is not None
    return placement


def problem(catalog: Catalog, make_job: Any, step: dict[str, Any], **spec: Any) -> tuple[str, str]:
    placement, problems = place(catalog, make_job, step, **spec)
    assert placement is None and len(problems) == 1, problems
    path, message = problems[0].path, problems[0].message
    return ".".join(map(str, path)), message


def test_steps_placed_alike_share_no_object_and_a_refusal_names_each_steps_own_field(
        catalog: Catalog, make_job: Any) -> None:
    """Placements are computed once per (catalog, class, capacity, size) and copied out: two steps of one shape get
    equal placements that share nothing (a manifest's shared objects become YAML anchors, and a caller's change to
    one template would reach the other); a refused size is reported at each step's own path."""
    job = make_job([{"name": n, "command": ["x"], "compute": "gaudi", "accelerators": 8} for n in ("a", "b")])
    (a, _), (b, _) = place_step(job, 0, catalog), place_step(job, 1, catalog)
    assert a == b and a is not b
    for field in ("node_selector", "tolerations", "requests", "limits"):
        assert getattr(a, field) is not getattr(b, field), field
    assert all(x is not y for x, y in zip(a.tolerations, b.tolerations, strict=True))
    huge = make_job([{"name": n, "command": ["x"], "resources": {"cpu": 4000}} for n in ("a", "b")])
    paths = [[p.path for p in place_step(huge, i, catalog)[1]] for i in (0, 1)]
    assert paths == [[("spec", "steps", 0, "resources", "cpu")], [("spec", "steps", 1, "resources", "cpu")]]


@pytest.mark.parametrize("cls", ["cpu", "gaudi", "graviton", "gpu"])
def test_node_selector_uses_class_capacity_and_arch_never_instance_types(catalog: Catalog, make_job: Any,
                                                                          cls: str) -> None:
    placement = placed(catalog, make_job, {"compute": cls})
    compute_class = catalog.compute_class(cls)
    assert placement.node_selector == {CLASS_LABEL: cls, CAPACITY_LABEL: compute_class.default_capacity,
                                       ARCH_LABEL: compute_class.resolved_arch}
    assert INSTANCE_TYPE_LABEL not in placement.node_selector
    assert not any(v in compute_class.instance_types for v in placement.node_selector.values())


def test_capacity_from_step_then_job_then_class_default(catalog: Catalog, make_job: Any) -> None:
    assert placed(catalog, make_job, {}).capacity == "spot"  # cpu's first capacity
    assert placed(catalog, make_job, {}, capacity="on-demand").capacity == "on-demand"
    on_demand = placed(catalog, make_job, {"capacity": "on-demand"}, capacity="spot")
    assert on_demand.capacity == "on-demand" and on_demand.node_selector[CAPACITY_LABEL] == "on-demand"


def test_capacity_the_class_does_not_offer(catalog: Catalog, make_job: Any) -> None:
    assert problem(catalog, make_job, {"compute": "gaudi", "capacity": "on-demand"}) == (
        "spec.steps.0.capacity", "compute class 'gaudi' offers spot, not on-demand")
    # From the job's default: the error points at spec.capacity.
    assert problem(catalog, make_job, {"compute": "graviton"}, capacity="on-demand")[0] == "spec.capacity"


def test_tolerations_for_the_class_taints(catalog: Catalog, make_job: Any) -> None:
    assert placed(catalog, make_job, {"compute": "cpu"}).tolerations == []
    assert placed(catalog, make_job, {"compute": "gaudi", "accelerators": 8}).tolerations == [
        {"key": "habana.ai/gaudi", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]


def test_a_taint_without_value_is_tolerated_with_exists(catalog: Catalog, make_job: Any) -> None:
    data = catalog.model_dump(by_alias=True)
    data["computeClasses"][0]["taints"] = [{"key": "dedicated", "effect": "NoExecute"}]
    custom = Catalog.model_validate(data)
    assert placed(custom, make_job, {}).tolerations == [
        {"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}]


def test_unknown_class_lists_the_known_ones(catalog: Catalog, make_job: Any) -> None:
    assert problem(catalog, make_job, {"compute": "tpu"}) == (
        "spec.steps.0.compute",
        "unknown compute class 'tpu' (did you mean 'gpu'?); the catalog has: cpu, gaudi, graviton, gpu")
    assert problem(catalog, make_job, {}, compute="tpu")[0] == "spec.compute"


def test_eight_gaudi_cards(catalog: Catalog, make_job: Any) -> None:
    placement = placed(catalog, make_job, {"compute": "gaudi", "accelerators": 8})
    exact = {"habana.ai/gaudi": "8", "hugepages-2Mi": "42000Mi", "vpc.amazonaws.com/efa": "4"}
    # Memory defaults to 80Gi a card; cpu to 90% of the node's allocatable share.
    assert placement.requests == {"cpu": "86", "memory": "640Gi", **exact}
    assert placement.limits == {"memory": "640Gi", **exact}
    assert placement.host_ipc and placement.capabilities == ("SYS_NICE",)


def test_one_gaudi_card_gets_its_share(catalog: Catalog, make_job: Any) -> None:
    placement = placed(catalog, make_job, {"compute": "gaudi", "accelerators": 1})
    assert placement.requests["hugepages-2Mi"] == "5250Mi"  # 42000Mi / 8 cards
    assert placement.requests["vpc.amazonaws.com/efa"] == "1"  # at least one interface
    assert placement.requests["memory"] == "80Gi"
    assert placement.requests["habana.ai/gaudi"] == "1"


def test_gaudi_hugepages_scale_per_card(catalog: Catalog, make_job: Any) -> None:
    for cards in range(1, 9):
        placement = placed(catalog, make_job, {"compute": "gaudi", "accelerators": cards})
        assert placement.requests["hugepages-2Mi"] == f"{5250 * cards}Mi"


def test_explicit_resources_win_over_defaults(catalog: Catalog, make_job: Any) -> None:
    placement = placed(catalog, make_job, {"compute": "gaudi", "accelerators": 8,
                                           "resources": {"cpu": 88, "memory": "600Gi", "ephemeral-storage": "50Gi"}})
    assert placement.requests["cpu"] == "88" and placement.requests["memory"] == "600Gi"
    assert placement.requests["ephemeral-storage"] == "50Gi" and placement.limits["memory"] == "600Gi"


def test_cpu_steps_default_and_carry_no_accelerator_extras(catalog: Catalog, make_job: Any) -> None:
    placement = placed(catalog, make_job, {})
    assert placement.requests == {"cpu": "1", "memory": "2Gi"} and placement.limits == {"memory": "2Gi"}
    assert not placement.host_ipc and placement.capabilities == ()
    assert placed(catalog, make_job, {"resources": {"cpu": "500m", "memory": "512Mi"}}).requests == {
        "cpu": "500m", "memory": "512Mi"}


def test_a_gaudi_class_step_without_cards_gets_no_device_extras(catalog: Catalog, make_job: Any) -> None:
    placement = placed(catalog, make_job, {"compute": "gaudi"})
    assert "habana.ai/gaudi" not in placement.requests and "hugepages-2Mi" not in placement.requests
    assert not placement.host_ipc and placement.capabilities == ()


def test_gpu_requests(catalog: Catalog, make_job: Any) -> None:
    placement = placed(catalog, make_job, {"compute": "gpu", "accelerators": 1})
    assert placement.requests["nvidia.com/gpu"] == placement.limits["nvidia.com/gpu"] == "1"
    assert "hugepages-2Mi" not in placement.requests and not placement.host_ipc


def test_oversize_accelerators_name_the_instance(catalog: Catalog, make_job: Any) -> None:
    assert problem(catalog, make_job, {"compute": "gaudi", "accelerators": 16}) == (
        "spec.steps.0.accelerators", "no gaudi node offers 16 habana.ai/gaudi; dl1.24xlarge has 8")


def test_accelerators_on_a_class_without_them(catalog: Catalog, make_job: Any) -> None:
    assert problem(catalog, make_job, {"accelerators": 1}) == (
        "spec.steps.0.accelerators", "compute class 'cpu' has no accelerators")


def test_oversize_cpu_and_memory_name_the_largest_instance(mixed_catalog: Catalog, make_job: Any) -> None:
    path, message = problem(mixed_catalog, make_job, {"resources": {"cpu": 64}})
    assert path == "spec.steps.0.resources.cpu"
    assert re.fullmatch(r"no cpu node offers 64 cpu; r5\.8xlarge has \d+m allocatable", message), message
    path, message = problem(mixed_catalog, make_job, {"resources": {"memory": "1Ti"}})
    assert path == "spec.steps.0.resources.memory"
    assert message.startswith("no cpu node offers 1048576Mi memory; r5.8xlarge has ")


def test_memory_beside_the_gaudi_hugepage_pool(catalog: Catalog, make_job: Any) -> None:
    # dl1.24xlarge: 718987Mi allocatable, 42000Mi of it hugepages.
    assert placed(catalog, make_job, {"compute": "gaudi", "accelerators": 8, "resources": {"memory": "676987Mi"}})
    path, _ = problem(catalog, make_job, {"compute": "gaudi", "accelerators": 8, "resources": {"memory": "676988Mi"}})
    assert path == "spec.steps.0.resources.memory"


def test_interruption_budget_by_capacity(catalog: Catalog, make_job: Any) -> None:
    assert placed(catalog, make_job, {}).interruption_retries == INTERRUPTION_RETRIES["spot"] == 5
    assert placed(catalog, make_job, {"capacity": "on-demand"}).interruption_retries == 2
    data = catalog.model_dump(by_alias=True)
    data["computeClasses"][0]["interruptionRetries"] = 9
    assert placed(Catalog.model_validate(data), make_job, {}).interruption_retries == 9


def test_gaudi_pods_get_host_ipc_and_sys_nice_in_the_manifest(catalog: Catalog, make_job: Any) -> None:
    manifest = compile_job(make_job([{"name": "t", "command": ["x"], "compute": "gaudi", "accelerators": 8}]), catalog)
    pod = as_run(manifest)["t"]
    assert json.loads(pod["podSpecPatch"]) == {"hostIPC": True}
    assert pod["container"]["securityContext"] == {"allowPrivilegeEscalation": False,
                                                   "capabilities": {"drop": ["ALL"], "add": ["SYS_NICE"]}}


# --- Spot-aware retries: the expressions, evaluated ------------------------------------------------------------
#
# A tiny evaluator of the expr-lang subset the compiler emits (Argo evaluates retryStrategy.expression with
# expr-lang): string literals, `lastRetry.<field>` lookups, ==, !=, matches (Go regexp, unanchored), contains,
# !, &&, || and parentheses, with expr-lang's precedences (unary ! binds tighter than ==, which binds tighter than
# &&, which binds tighter than ||). Anything else in the expression fails the tokenizer, so a change to the
# expressions cannot slip past this test unevaluated.

_TOKEN = re.compile(r'\s*(?:(?P<str>"(?:[^"\\]|\\.)*")|(?P<op>&&|\|\||==|!=|!|\(|\))|(?P<word>[A-Za-z_][\w.]*))')
_BINARY = {"||": 10, "&&": 15, "==": 20, "!=": 20, "matches": 20, "contains": 20}


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(text.rstrip()):
        match = _TOKEN.match(text, pos)
        assert match, f"outside the evaluated subset at {text[pos:]!r}"
        kind = match.lastgroup
        assert kind is not None
        out.append((kind, match.group(kind)))
        pos = match.end()
    return out


def evaluate(expression: str, last_retry: dict[str, str]) -> Any:
    tokens = _tokens(expression)
    position = 0

    def peek() -> tuple[str, str] | None:
        return tokens[position] if position < len(tokens) else None

    def take() -> tuple[str, str]:
        nonlocal position
        position += 1
        return tokens[position - 1]

    def unary() -> Any:
        kind, value = take()
        if value == "!":
            operand = unary()
            assert isinstance(operand, bool), "! needs a bool"
            return not operand
        if value == "(":
            inner = binary(0)
            assert take()[1] == ")"
            return inner
        if kind == "str":
            return json.loads(value)
        root, _, field = value.partition(".")
        assert kind == "word" and root == "lastRetry" and field in last_retry, value
        return last_retry[field]

    def binary(min_precedence: int) -> Any:
        left = unary()
        while (token := peek()) and token[1] in _BINARY and _BINARY[token[1]] > min_precedence:
            op = take()[1]
            right = binary(_BINARY[op])
            if op in ("&&", "||"):
                assert isinstance(left, bool) and isinstance(right, bool)
                left = (left and right) if op == "&&" else (left or right)
            elif op == "==":
                left = left == right
            elif op == "!=":
                left = left != right
            elif op == "matches":
                left = re.search(right, left) is not None
            else:
                left = right in left
        return left

    result = binary(0)
    assert position == len(tokens), "trailing tokens"
    return result


def test_the_evaluator_follows_expr_precedence() -> None:
    row = {"status": "Failed", "message": "x"}
    assert evaluate('lastRetry.status == "Failed" || lastRetry.status == "Error" && lastRetry.message == "y"', row)
    assert not evaluate('!(lastRetry.status == "Failed")', row)
    assert evaluate('lastRetry.message matches "^x$" && lastRetry.message contains "x"', row)
    with pytest.raises(AssertionError):
        evaluate("lastRetry.exitCode > 1", row)  # not in the subset: the tokenizer refuses


# lastRetry as Argo reports the pod node: status is the node phase, message the pod's status message or
# "<reason> (exit code N)" of the main container.
POD_DELETED = {"status": "Error", "message": "pod deleted", "exitCode": "-1"}
NODE_SHUTDOWN = {"status": "Failed", "message": "Pod was terminated in response to imminent node shutdown.",
                 "exitCode": "-1"}
NODE_PRESSURE_EVICTION = {"status": "Failed", "exitCode": "-1",
                          "message": "The node was low on resource: memory. Threshold quantity: 100Mi, "
                                     "available: 52Ki. "}
# An eviction by a drain (kubectl, Karpenter, the node termination handler) sets no pod message: the kubelet runs the
# main container's stop hook, which leaves its mark in the container's termination message, then SIGTERMs the
# containers, and Argo may see the Failed pod before it is gone. The mark: argoexec's error for the command it lacks.
STOP_MARK = f'unknown command "{STOPPED_FROM_OUTSIDE}" for "argoexec"'
EVICTED = {"status": "Failed", "message": f"main: Error (exit code 143): {STOP_MARK}", "exitCode": "143"}
# The program's own SIGTERM exit (or its supervisor's): no mark.
OWN_SIGTERM = {"status": "Failed", "message": "main: Error (exit code 143)", "exitCode": "143"}
OOM_KILLED = {"status": "Failed", "message": "OOMKilled (exit code 137)", "exitCode": "137"}
EXIT_1 = {"status": "Failed", "message": "Error (exit code 1)", "exitCode": "1"}
# SIGKILL once a deletion's grace period ran out (drain, preemption): the node's loss, not the program's.
SIGKILL_137 = {"status": "Failed", "message": f"main: Error (exit code 137): {STOP_MARK}", "exitCode": "137"}
# The wrapper's child is the DAG node around the pod's retry node.
WRAPPED_FAILURE = {"status": "Failed", "message": "child 'job-abc-123' failed", "exitCode": ""}
WRAPPED_EXHAUSTED_INTERRUPTIONS = {"status": "Error", "message": "pod deleted", "exitCode": "-1"}


@pytest.mark.parametrize(
    ("last_retry", "interruption", "application"),
    [
        (POD_DELETED, True, False),
        (NODE_SHUTDOWN, True, False),
        (NODE_PRESSURE_EVICTION, True, False),
        (EVICTED, True, False),
        (OOM_KILLED, False, True),
        (EXIT_1, False, True),
        (SIGKILL_137, True, False),
        (OWN_SIGTERM, False, True),
        (WRAPPED_FAILURE, False, True),
        (WRAPPED_EXHAUSTED_INTERRUPTIONS, True, False),
    ],
    ids=["pod-deleted", "node-shutdown", "node-pressure", "evicted", "oom-137", "exit-1", "sigkill-137",
         "own-sigterm", "wrapped-failure", "wrapped-interruptions"],
)
def test_retry_expressions_split_interruptions_from_application_failures(
    last_retry: dict[str, str], interruption: bool, application: bool
) -> None:
    assert evaluate(INTERRUPTION_EXPRESSION, last_retry) is interruption
    assert evaluate(APPLICATION_EXPRESSION, last_retry) is application
    # Never both: an interruption must not spend the application's budget.
    assert not (interruption and application)


def test_an_oom_kill_is_never_an_interruption_whatever_the_phase() -> None:
    assert not evaluate(INTERRUPTION_EXPRESSION, {"status": "Error", "message": "OOMKilled (exit code 137)"})


def test_retry_strategies_sit_on_the_right_templates(catalog: Catalog, make_job: Any) -> None:
    job = make_job([{"name": "a", "command": ["x"]}, {"name": "b", "command": ["x"], "needs": ["a"], "retries": 0},
                    {"name": "c", "command": ["x"], "capacity": "on-demand", "retries": 4}], retries=2)
    templates = as_run(compile_job(job, catalog))  # each expression referenced, written once in the workflow
    # The pod template retries interruptions on their own budget, with backoff...
    for name, limit in (("a", 5), ("b", 5), ("c", 2)):
        strategy = templates[name]["retryStrategy"]
        assert strategy["limit"] == limit and strategy["expression"] == INTERRUPTION_EXPRESSION
        assert "retryPolicy" not in strategy  # with an expression and no policy, the expression decides (Argo >= 3.5)
        assert strategy["backoff"]["duration"]
    # ...and a wrapper around it retries application failures, only where retries are asked for.
    assert templates["a" + ATTEMPTS_SUFFIX]["retryStrategy"]["limit"] == 2
    assert templates["c" + ATTEMPTS_SUFFIX]["retryStrategy"]["limit"] == 4
    assert "b" + ATTEMPTS_SUFFIX not in templates
    wrapper = templates["a" + ATTEMPTS_SUFFIX]
    assert wrapper["retryStrategy"]["expression"] == APPLICATION_EXPRESSION
    assert wrapper["dag"]["tasks"] == [{"name": "a", "template": "a"}]
    assert "container" not in wrapper
    tasks = {t["name"]: t for t in templates["Main"]["dag"]["tasks"]}
    assert tasks["a"]["template"] == "a" + ATTEMPTS_SUFFIX and tasks["b"]["template"] == "b"


def test_a_request_only_the_larger_type_of_a_mixed_class_offers_is_refused(mixed_catalog: Catalog,
                                                                          make_job: Any) -> None:
    catalog = mixed_catalog
    # cpu lists r5.4xlarge (15890m, 118312Mi allocatable) and r5.8xlarge: cluster-autoscaler may model or launch
    # the smaller one, so a request must fit it (wf.model.nodegroups).
    assert placed(catalog, make_job, {"resources": {"cpu": "15890m", "memory": "118312Mi"}})
    path, message = problem(catalog, make_job, {"resources": {"cpu": 20}})
    assert path == "spec.steps.0.resources.cpu"
    assert message == ("compute class cpu mixes instance sizes: 20 cpu fits r5.8xlarge but not r5.4xlarge (15890m "
                       "allocatable); cluster-autoscaler may model or launch r5.4xlarge for a scale-up, so request "
                       "at most 15890m or use a class whose types are one size")
    path, message = problem(catalog, make_job, {"resources": {"memory": "118313Mi"}})
    assert path == "spec.steps.0.resources.memory"
    assert "118313Mi memory fits r5.8xlarge but not r5.4xlarge (118312Mi allocatable)" in message


def test_a_compiled_pod_template_reads_back_its_class_capacity_queue_and_fallback(catalog: Catalog,
                                                                                   make_job: Any) -> None:
    job = make_job([{"name": "s", "command": ["x"]}], compute="cpu", team="perception")
    (template,) = [t for t in compile_job(job, catalog)["spec"]["templates"] if t["name"] == "s"]
    placed = read_placement(template)
    # cpu: Spot, On-Demand after 2 interruptions (the template's capacity label is an Argo expression).
    assert (placed.compute_class, placed.capacity, placed.queue, placed.fallback_after) == ("cpu", "spot", "default", 2)
    assert placed.capacities == ("spot", "on-demand")
    assert [placed.attempt_capacity(i) for i in range(4)] == ["spot", "spot", "on-demand", "on-demand"]
    assert {(g.compute_class, g.capacity) for g in placed.node_groups(catalog)} == {("cpu", "spot")}


def test_a_pod_reads_back_like_its_template_and_a_lone_affinity_term_pins_labels() -> None:
    pod = {"metadata": {"labels": {CLASS_LABEL: "cpu", CAPACITY_LABEL: "on-demand"}},
           "spec": {"nodeSelector": {CLASS_LABEL: "cpu", CAPACITY_LABEL: "on-demand"}}}
    assert read_placement(pod) == CompiledPlacement("cpu", "on-demand")
    # An unevaluated expression is no capacity; what the pod selects wins over its labels.
    expression = {CLASS_LABEL: "cpu", CAPACITY_LABEL: "{{=asInt(retries) >= 2 ? 'on-demand' : 'spot'}}"}
    assert read_placement({"metadata": {"labels": expression}}) == CompiledPlacement("cpu")

    def affinity(*terms: dict[str, Any]) -> dict[str, Any]:
        return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": list(terms)}}}}

    gaudi = {"matchExpressions": [{"key": CLASS_LABEL, "operator": "In", "values": ["gaudi"]}]}
    cpu = {"matchExpressions": [{"key": CLASS_LABEL, "operator": "In", "values": ["cpu"]}]}
    assert read_placement(affinity(gaudi)).compute_class == "gaudi"
    assert read_placement(affinity(gaudi, cpu)).compute_class is None  # ORed terms pin nothing
    assert read_placement(None) == CompiledPlacement()


@pytest.mark.parametrize("capacity", CAPACITIES)
def test_a_node_labelled_by_eks_alone_reads_as_wfs_capacity(catalog: Catalog, capacity: str) -> None:
    group = next(g for g in node_groups(catalog) if g.capacity == capacity)
    labels = {k: v for k, v in group.node_labels(group.instance_types[0]).items() if k != CAPACITY_LABEL}
    assert labels[EKS_CAPACITY_LABEL] == EKS_CAPACITY_VALUES[capacity]
    assert node_capacity(labels) == capacity
    assert node_capacity({}) is None


def test_steps_whose_image_only_real_nodes_hold_are_placed_on_them(catalog: Catalog, make_job: Any) -> None:
    """The local cluster's real nodes hold images no registry serves (built there or imported): a simulated node
    of the class could only pretend to run them, so their pods select the real nodes, within the class."""
    job = make_job([{"name": "local", "command": ["x"], "image": "train:1"},
                    {"name": "default", "command": ["x"], "needs": ["local"]},
                    {"name": "other", "command": ["x"], "image": "ghcr.io/me/other:2", "needs": ["local"]}],
                   image="wf.local/python:3.11")
    manifest = compile_job(job, catalog)
    # The names the kubelet reports in node.status.images: whole, as containerd keeps them.
    placed = on_real_nodes(manifest, frozenset({"docker.io/library/train:1", "wf.local/python:3.11"}))
    templates = {t["name"]: t for t in manifest["spec"]["templates"]}
    assert sorted(placed) == ["default", "local"]
    assert templates["local"]["nodeSelector"] == {CLASS_LABEL: "cpu", CAPACITY_LABEL: "spot", ARCH_LABEL: "amd64",
                                                  REAL_NODE_LABEL: "true"}
    assert templates["local"]["tolerations"] == [{"key": REAL_NODE_LABEL, "operator": "Equal", "value": "true",
                                                  "effect": "NoSchedule"}]  # the real nodes' taint
    assert REAL_NODE_LABEL not in templates["other"]["nodeSelector"] and "tolerations" not in templates["other"]
    assert "nodeSelector" not in templates["Main"]  # a DAG template makes no pod
    # A template naming no image of its own runs the templateDefaults' image.
    del templates["default"]["container"]["image"]
    templates["default"]["nodeSelector"].pop(REAL_NODE_LABEL)
    assert on_real_nodes(manifest, frozenset({"wf.local/python:3.11"})) == ["default"]
    assert on_real_nodes(compile_job(job, catalog), frozenset()) == []  # EKS: no node is real
