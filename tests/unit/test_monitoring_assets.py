"""The Grafana dashboard and the Prometheus alerts use only what the triggerer exports.

``deploy/grafana/sharedstream.json`` and ``deploy/prometheus/sharedstream-alerts.yml``
are read here, without Grafana or Prometheus, and every PromQL expression in them is
held to ``sharedstream.triggerer.metrics.CATALOG``:

* every metric name is one the catalog exports, as a scrape shows it (a counter with
  ``_total``, a summary as ``_sum`` and ``_count``); no other metric is used;
* every label in a selector is one the metric declares, or ``job``/``instance`` (the
  labels Prometheus adds to each scraped series); every ``by``/``on`` label, legend
  ``{{label}}`` and alert ``$labels.x`` is one the expression's metrics can carry;
* ``rate``/``increase`` read counters, ``delta``/``deriv`` read gauges.

``deploy/prometheus/sharedstream-alerts.test.yml`` (the ``promtool test rules`` cases)
must show every alert firing and not firing, on series shaped like a real scrape.
PromQL syntax and the alerts' behaviour are promtool's to check: ``scripts/promtool-test``.

PyYAML is not a dependency of the project, so the YAML files are read by a small loader
below that accepts only the plain subset they are written in and refuses the rest.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from sharedstream.triggerer.metrics import CATALOG, MetricSpec

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "sharedstream.json"
RULES = ROOT / "deploy" / "prometheus" / "sharedstream-alerts.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "sharedstream-alerts.test.yml"

TARGET_LABELS = frozenset({"job", "instance"})  # added by Prometheus to every scraped series
SUFFIXES = {"gauge": ("",), "counter": ("_total",), "summary": ("_sum", "_count")}
EXPOSED: dict[str, MetricSpec] = {
    f"{spec.full_name}{suffix}": spec for spec in CATALOG for suffix in SUFFIXES[spec.kind]}


# --- a strict loader for the plain subset of YAML the rule files use ---------------------

def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


_TOKEN = re.compile(r"""
    (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<range>\[[^\]]*\])
  | (?P<number>[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)
  | (?P<ident>[A-Za-z_:][\w:]*)
  | (?P<op>==|!=|=~|!~|>=|<=|[-+*/%^<>=,(){}])
  | (?P<space>\s+)
""", re.VERBOSE)
_GROUPING = {"by", "on", "ignoring", "group_left", "group_right"}
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "atan2", "without"}
_AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count",
                 "count_values", "bottomk", "topk", "quantile", "limitk", "limit_ratio"}
_COUNTER_FUNCTIONS = {"rate", "irate", "increase", "resets"}
_GAUGE_FUNCTIONS = {"delta", "idelta", "deriv", "predict_linear"}


@dataclass(frozen=True)
class Selector:
    metric: str
    matchers: tuple[tuple[str, str, str], ...]  # (label, operator, value)
    after_and: bool = False  # the right side of `and`: it only narrows the left side


@dataclass(frozen=True)
class Expression:
    text: str
    selectors: tuple[Selector, ...]
    grouping: tuple[tuple[str, ...], ...]  # each by/on/... label list
    range_functions: tuple[tuple[str, str], ...]  # (function, metric it reads)

    @property
    def labels(self) -> set[str]:
        """The labels the expression's series can carry."""
        found = set(TARGET_LABELS)
        for selector in self.selectors:
            spec = EXPOSED.get(selector.metric)
            found |= set(spec.labels) if spec else set()
        return found

    @property
    def result_labels(self) -> set[str]:
        """The labels a result can carry: the ``by`` lists' common labels, if any."""
        by_lists = [set(labels) for labels in self.grouping_by]
        return set.intersection(*by_lists) if by_lists else self.labels

    @property
    def grouping_by(self) -> list[tuple[str, ...]]:
        return [labels[1:] for labels in self.grouping if labels[0] == "by"]


def tokens(text: str) -> list[tuple[str, str]]:
    out, position = [], 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if not match:
            raise AssertionError(f"cannot read PromQL at {text[position:position + 30]!r}")
        assert match.lastgroup is not None
        if match.lastgroup != "space":
            out.append((match.lastgroup, match.group()))
        position = match.end()
    return out


def parse(text: str) -> Expression:
    toks = tokens(text)
    selectors: list[Selector] = []
    grouping: list[tuple[str, ...]] = []
    range_functions: list[tuple[str, str]] = []
    k, after_and = 0, False

    def label_list(start: int) -> tuple[list[str], int]:
        assert toks[start][1] == "(", f"{text}: a label list must follow"
        labels, j = [], start + 1
        while toks[j][1] != ")":
            if toks[j][1] != ",":
                assert toks[j][0] == "ident", f"{text}: not a label: {toks[j][1]}"
                labels.append(toks[j][1])
            j += 1
        return labels, j + 1

    while k < len(toks):
        kind, word = toks[k]
        following = toks[k + 1][1] if k + 1 < len(toks) else ""
        if kind != "ident":
            k += 1
        elif word in _GROUPING:
            labels, k = label_list(k + 1)
            grouping.append((word, *labels))
        elif word in _KEYWORDS:
            assert word != "without", f"{text}: use `by`, whose labels can be checked"
            after_and = word == "and"
            k += 1
        elif following == "(" or word in _AGGREGATIONS:  # `sum by (x) (...)` too
            assert word not in ("label_replace", "label_join"), \
                f"{text}: {word} makes labels this check does not follow"
            if word in _COUNTER_FUNCTIONS | _GAUGE_FUNCTIONS and toks[k + 2][0] == "ident":
                range_functions.append((word, toks[k + 2][1]))
            k += 1
        else:  # a metric name, with its matchers if any
            matchers: list[tuple[str, str, str]] = []
            k += 1
            if following == "{":
                k += 1
                while toks[k][1] != "}":
                    if toks[k][1] == ",":
                        k += 1
                        continue
                    (label_kind, label), (_, operator), (value_kind, value) = toks[k:k + 3]
                    assert label_kind == "ident" and value_kind == "string", \
                        f"{text}: not a label matcher: {label} {operator} {value}"
                    matchers.append((label, operator, json.loads(value)
                                     if value.startswith('"') else value[1:-1]))
                    k += 3
                k += 1
            selectors.append(Selector(word, tuple(matchers), after_and))
            after_and = False
    return Expression(text, tuple(selectors), tuple(grouping), tuple(range_functions))


def problems(where: str, expression: Expression) -> Iterator[str]:
    """What in one expression is not what the triggerer exports."""
    if not expression.selectors:
        yield f"{where}: reads no metric: {expression.text}"
    for selector in expression.selectors:
        spec = EXPOSED.get(selector.metric)
        if spec is None:
            yield f"{where}: {selector.metric} is not exported (not in the metric catalog)"
            continue
        for label, _, _ in selector.matchers:
            if label not in {*spec.labels, *TARGET_LABELS}:
                yield f"{where}: {selector.metric} has no label {label!r}"
    for labels in expression.grouping:
        for label in labels[1:]:
            if label not in expression.labels:
                yield f"{where}: `{labels[0]} ({label})`: no metric here has that label"
    for function, metric in expression.range_functions:
        spec = EXPOSED.get(metric)
        if spec is None:
            continue
        wanted = "gauge" if function in _GAUGE_FUNCTIONS else "counter or summary"
        if (spec.kind == "gauge") != (wanted == "gauge"):
            yield f"{where}: {function}() of the {spec.kind} {metric} (wants a {wanted})"


def label_references(template: str, pattern: str) -> set[str]:
    return set(re.findall(pattern, template))


# --- the dashboard ------------------------------------------------------------------------

def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return loaded


def all_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from all_panels(panel.get("panels", []))


def dashboard_queries() -> list[tuple[str, Expression, str]]:
    """(where, expression, legend) of every panel query."""
    out = []
    for panel in all_panels(dashboard()["panels"]):
        for target in panel.get("targets", []):
            where = f"panel {panel['title']!r} query {target['refId']}"
            out.append((where, parse(target["expr"]), target.get("legendFormat", "")))
    return out


def variables() -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in dashboard()["templating"]["list"]}


# Named by issue 19: the dashboard must show each of them.
ON_THE_DASHBOARD = {
    "sharedstream_messages_received_total", "sharedstream_events_persisted_total",
    "sharedstream_partition_lag", "sharedstream_partition_commit_lag",
    "sharedstream_held_messages", "sharedstream_partition_at_bound",
    "sharedstream_dead_letters_total", "sharedstream_dead_letter_failures_total",
    "sharedstream_rejections_recorded_total", "sharedstream_uow_batch_latency_seconds_sum",
    "sharedstream_uow_batch_latency_seconds_count", "sharedstream_database_healthy",
    "sharedstream_delivery_lag_events", "sharedstream_delivery_lag_seconds",
    "sharedstream_delivery_failures_total", "sharedstream_broker_ready",
}


def test_the_dashboard_is_a_current_grafana_dashboard_with_its_variables() -> None:
    board = dashboard()
    assert board["schemaVersion"] >= 39  # Grafana 11 and later
    assert board["uid"] and board["title"]
    found = variables()
    assert found["datasource"]["type"] == "datasource"
    assert found["datasource"]["query"] == "prometheus"
    group = found["group"]
    assert group["type"] == "query"
    assert group["query"] == group["definition"] == \
        "label_values(sharedstream_group_polling, group)"
    assert group["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def test_every_variable_query_reads_a_declared_label_of_an_exported_metric() -> None:
    for name, variable in variables().items():
        if variable["type"] != "query":
            continue
        match = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", variable["query"])
        assert match, f"variable {name}: {variable['query']!r}"
        metric, label = match.groups()
        assert metric in EXPOSED, f"variable {name}: {metric} is not exported"
        assert label in EXPOSED[metric].labels, f"variable {name}: {metric} has no {label}"


def test_every_panel_reads_the_chosen_data_source_and_has_its_own_place() -> None:
    taken: set[tuple[int, int]] = set()
    ids: set[int] = set()
    for panel in all_panels(dashboard()["panels"]):
        assert panel["id"] not in ids, f"panel id {panel['id']} twice"
        ids.add(panel["id"])
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        cells = {(grid["x"] + dx, grid["y"] + dy)
                 for dx in range(grid["w"]) for dy in range(grid["h"])}
        assert not cells & taken, f"panel {panel['title']!r} overlaps another"
        taken |= cells
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], f"panel {panel['title']!r} has no query"
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"]


def test_the_dashboard_shows_what_the_issue_asks_for() -> None:
    shown = {s.metric for _, expression, _ in dashboard_queries()
             for s in expression.selectors}
    assert not ON_THE_DASHBOARD - shown, "not on the dashboard"


def test_every_dashboard_query_uses_only_exported_metrics_and_their_labels() -> None:
    queries = dashboard_queries()
    assert len(queries) >= 30
    found = [problem for where, expression, _ in queries
             for problem in problems(where, expression)]
    for where, expression, legend in queries:
        for label in label_references(legend, r"\{\{\s*(\w+)\s*\}\}"):
            if label not in expression.result_labels:
                found.append(f"{where}: legend {{{{{label}}}}}: the result has no such label")
    assert not found, "\n".join(found)


def test_every_selector_follows_the_dashboard_variables() -> None:
    """A metric with a ``group`` (``destination``) label is filtered by ``$group``
    (``$destination``), unless it only narrows another selector (``and``)."""
    for where, expression, _ in dashboard_queries():
        for selector in expression.selectors:
            labels = EXPOSED[selector.metric].labels if selector.metric in EXPOSED else ()
            for variable in ("group", "destination"):
                if variable in labels and not selector.after_and:
                    assert (variable, "=~", f"${variable}") in selector.matchers, \
                        f"{where}: {selector.metric} is not filtered by ${variable}"


# --- the alerts ---------------------------------------------------------------------------

def alert_rules() -> list[dict[str, Any]]:
    rules = [rule for group in load_yaml(RULES)["groups"] for rule in group["rules"]]
    assert all("alert" in rule for rule in rules), "only alerting rules are expected here"
    return rules


def test_every_alert_is_named_once_with_a_severity_and_a_summary() -> None:
    rules = alert_rules()
    names = [rule["alert"] for rule in rules]
    assert len(names) == len(set(names)) >= 8
    for rule in rules:
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, rule["alert"]
        assert {"summary", "description"} <= set(rule["annotations"]), rule["alert"]
        if "for" in rule:
            assert re.fullmatch(r"([0-9]+[smh])+", rule["for"]), rule["alert"]


def test_the_issue_s_alerts_are_there() -> None:
    assert {
        "SharedstreamBrokerNotReady", "SharedstreamDatabaseUnhealthy",
        "SharedstreamCommitsStuck", "SharedstreamPartitionAtBound",
        "SharedstreamDeadLettersFailing", "SharedstreamUnitOfWorkCommitsFailing",
        "SharedstreamDestinationFailing", "SharedstreamDeliveryLagHigh",
        "SharedstreamGroupNotPolling",
    } <= {rule["alert"] for rule in alert_rules()}


def test_every_alert_uses_only_exported_metrics_and_their_labels() -> None:
    found = []
    for rule in alert_rules():
        where = f"alert {rule['alert']}"
        expression = parse(rule["expr"])
        found.extend(problems(where, expression))
        for text in rule["annotations"].values():
            for label in label_references(text, r"\$labels\.(\w+)"):
                if label not in expression.result_labels:
                    found.append(f"{where}: $labels.{label}: the alert has no such label")
    assert not found, "\n".join(found)


def rule_tests() -> dict[str, Any]:
    loaded: dict[str, Any] = load_yaml(RULE_TESTS)
    return loaded


def test_the_rule_tests_read_the_rules_file() -> None:
    assert rule_tests()["rule_files"] == [RULES.name]


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in rule_tests()["tests"]:
        for check in case["alert_rule_test"]:
            (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = {rule["alert"] for rule in alert_rules()}
    assert names - firing == set(), "never shown firing"
    assert names - quiet == set(), "never shown quiet"
    assert firing | quiet <= names, "a test names an alert that does not exist"


def test_the_test_series_look_like_a_scrape_of_the_triggerer() -> None:
    """Each input series is an exported metric with exactly its declared labels, plus
    ``job`` and ``instance``: a test on a series the triggerer never shows proves nothing."""
    found = []
    for case in rule_tests()["tests"]:
        for series in case["input_series"]:
            expression = parse(series["series"])
            (selector,) = expression.selectors
            spec = EXPOSED.get(selector.metric)
            if spec is None:
                found.append(f"{case['name']}: {selector.metric} is not exported")
                continue
            labels = {label for label, operator, _ in selector.matchers if operator == "="}
            if labels != {*spec.labels, *TARGET_LABELS}:
                found.append(f"{case['name']}: {selector.metric} with labels {sorted(labels)}"
                             f", not {sorted({*spec.labels, *TARGET_LABELS})}")
    assert not found, "\n".join(found)


# --- the checks themselves ------------------------------------------------------------------

def test_the_promql_reader_finds_names_labels_and_functions() -> None:
    expression = parse('max by (job, group) (delta(sharedstream_partition_lag{group=~"a|b"}'
                       '[10m])) > 0 unless on (group) sum(rate(sharedstream_commits_total'
                       '[$__rate_interval])) and sharedstream_broker_ready == 1')
    assert [s.metric for s in expression.selectors] == [
        "sharedstream_partition_lag", "sharedstream_commits_total", "sharedstream_broker_ready"]
    assert expression.selectors[0].matchers == (("group", "=~", "a|b"),)
    assert expression.grouping == (("by", "job", "group"), ("on", "group"))
    assert expression.range_functions == (("delta", "sharedstream_partition_lag"),
                                          ("rate", "sharedstream_commits_total"))
    assert expression.result_labels == {"job", "group"}
    assert not list(problems("ok", expression))


@pytest.mark.parametrize(("expr", "complaint"), [
    ("sharedstream_messages_received", "not exported"),  # a counter without _total
    ("sharedstream_uow_batch_latency_seconds", "not exported"),  # a summary without a part
    ("up == 0", "not exported"),
    ('sharedstream_database_healthy{group="a"}', "has no label 'group'"),
    ("sum by (topic) (sharedstream_held_messages)", "no metric here has that label"),
    ("rate(sharedstream_partition_lag[5m])", "wants a counter"),
    ("delta(sharedstream_commits_total[5m])", "wants a gauge"),
])
def test_the_checks_catch_what_they_are_for(expr: str, complaint: str) -> None:
    assert any(complaint in problem for problem in problems("case", parse(expr)))
