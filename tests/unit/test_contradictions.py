"""The contradiction rules and the consolidation merge, pure (no model: similarities are given)."""

from __future__ import annotations

import numpy as np
import pytest

from engram_server.domain.consolidation import ConsolidationPolicy, clusters, missing_specifics, rule_merge
from engram_server.domain.contradictions import Basis, change_cue, judge
from engram_server.domain.model import MemoryRecord
from engram_server.domain.specifics import conflicts


def verdict(a: str, b: str, similarity: float = 0.85) -> tuple[bool | None, Basis | None]:
    v = judge(a, b, similarity, conflicts(a, b))
    return v.contradiction, v.basis


@pytest.mark.parametrize(
    ("text", "old"),
    [
        ("The project moved from Express to Fastify.", "Express"),
        ("We migrated the database from MySQL 5.7 to PostgreSQL.", "MySQL 5.7"),
        ("用户从北京搬到了上海。", "北京"),
        ("项目的数据库从MySQL换成了PostgreSQL。", "MySQL"),
        ("The team now uses Linear instead of Jira.", "Jira"),
    ],
)
def test_change_statements_name_the_old_value(text: str, old: str) -> None:
    cue = change_cue(text)
    assert cue is not None and cue.old == old


@pytest.mark.parametrize(
    "text",
    [
        "The user no longer drinks coffee.",
        "用户不再喝咖啡了。",
        "CI switched to GitHub Actions.",
        "站会改为十点。",
    ],
)
def test_change_statements_without_an_old_value(text: str) -> None:
    cue = change_cue(text)
    assert cue is not None and cue.old is None


def test_plain_statements_are_not_change_statements() -> None:
    for text in ("The staging cluster has 12 nodes.", "用户住在北京。", "Invoice 4471 was paid on March 3."):
        assert change_cue(text) is None


def test_a_version_inside_the_change_statement_is_the_changed_value_not_a_label() -> None:
    stored, new = (
        "The database is PostgreSQL 14.",
        "The database was upgraded from PostgreSQL 14 to PostgreSQL 16.",
    )
    assert verdict(stored, new, 0.9) == (True, Basis.CHANGE_STATEMENT)
    # Outside the change statement a counter-like label still tells two records apart.
    assert verdict("writer 1 uses Go.", "writer 2 switched to Rust.", 0.9)[0] is False


def test_a_change_statement_naming_the_stored_value_supersedes_even_at_the_floor() -> None:
    assert verdict("The project uses Express.", "The project moved from Express to Fastify.", 0.73) == (
        True,
        Basis.CHANGE_STATEMENT,
    )
    # Below the floor (0.72) nothing is judged.
    assert (
        verdict("The project uses Express.", "The project moved from Express to Fastify.", 0.70)[0] is False
    )


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("The staging cluster has 12 nodes.", "The staging cluster has 16 nodes."),
        ("The team standup is at 9:30.", "The team standup is at 10:00."),
        ("The user's manager is Priya.", "The user's manager is Daniel."),
        ("Maria eats meat.", "Maria does not eat meat."),
        ("服务的超时时间是30秒。", "服务的超时时间是60秒。"),
        # Numbers after a verb form, a quantity word, a month or before a unit are values, not labels.
        ("The service runs 4 workers.", "The service runs 6 workers."),
        (
            "The office Wi-Fi password rotates every 30 days.",
            "The office Wi-Fi password rotates every 90 days.",
        ),
        ("The launch is on May 3.", "The launch is on May 10."),
        ("The upload limit is set to 25 MB.", "The upload limit is set to 50 MB."),
        ("The deploy freeze starts on Friday.", "The deploy freeze starts on Monday."),
        ("API的限流是每分钟100次。", "API的限流是每分钟250次。"),
        ("测试集群有12个节点。", "测试集群有16个节点。"),
    ],
)
def test_changed_specifics_of_the_same_statement_supersede(a: str, b: str) -> None:
    assert verdict(a, b) == (True, Basis.SPECIFICS)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Invoice 4471 was paid on March 3.", "Invoice 4472 was paid on March 3."),
        ("Ticket OPS-1182 is assigned to Maria.", "Ticket OPS-1190 is assigned to Maria."),
        ("Room 12 is booked for the design review.", "Room 14 is booked for the design review."),
        ("发票4471已付款。", "发票4472已付款。"),
        ("12号会议室订给了设计评审。", "14号会议室订给了设计评审。"),
        ("Priya leads the payments team.", "Daniel leads the payments team."),
        ("Mia Baker moved to Prague in 2016.", "Mia Berg moved to Warsaw in 2021."),  # two people
        ("Server db-eu-3 has 64 GB of RAM.", "Server db-eu-4 has 64 GB of RAM."),
        # A whole number right after any noun is a counter-like label (rule 3).
        ("writer 1 noted fact number 10 about billing.", "writer 2 noted fact number 10 about billing."),
        ("Writer 1 noted fact number 10.", "Writer 2 noted fact number 10."),
        ("Locker 131 belongs to the search team.", "Locker 132 belongs to the search team."),
        ("Tenant 62 parks in the orange zone.", "Tenant 63 parks in the orange zone."),
        ("Entry 12: the pump near the tank read 40 bar.", "Entry 13: the pump near the tank read 40 bar."),
        ("员工12负责计费工作。", "员工13负责计费工作。"),
        ("作者3记录了第10条事实。", "作者4记录了第10条事实。"),
        ("第3号仓库存放椅子。", "第4号仓库存放椅子。"),
    ],
)
def test_labels_and_leading_names_make_different_subjects(a: str, b: str) -> None:
    assert verdict(a, b, 0.97)[0] is False


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("The user ran 5 km on Monday.", "The user ran 8 km on Monday."),
        ("用户昨天跑了5公里。", "用户昨天跑了8公里。"),
        ("The backend service has 3 replicas.", "The frontend service has 5 replicas."),
        ("The user likes Italian food.", "The user likes Italian wine."),
        ("The meeting is on Monday.", "The meeting is on Monday at 10:00."),  # adds a detail
        # Another word swapped as well as the value: another subject, not a changed value.
        (
            "The web team's standup is at 13:00 every Tuesday.",
            "The platform team's standup is at 17:15 every Tuesday.",
        ),
        ("Locker A belongs to the search team on floor 2.", "Locker A belongs to the auth team on floor 3."),
    ],
)
def test_occurrences_other_things_and_added_details_are_left_alone(a: str, b: str) -> None:
    assert verdict(a, b, 0.9)[0] is not True


def _record(i: int, content: str, day: int) -> MemoryRecord:
    return MemoryRecord(id=f"id-{i}", collection="c", content=content, created_at=day * 86_400.0)


def test_the_rule_merge_keeps_every_sentence_in_time_order_with_days() -> None:
    sources = [
        _record(2, "Emma had her second lesson on March 10", 9),
        _record(1, "Emma started piano lessons on March 3.", 2),
        _record(3, "Emma started piano lessons on March 3.", 10),  # an exact repeat
    ]
    merged = rule_merge(sources)
    assert merged == (
        "(1970-01-03) Emma started piano lessons on March 3. "
        "(1970-01-10) Emma had her second lesson on March 10."
    )
    assert missing_specifics(sources, merged) == []
    assert set(missing_specifics(sources, "Emma takes piano lessons.")) == {"3", "10", "month:3"}


def test_clusters_need_a_seed_link_and_every_member_close() -> None:
    pol = ConsolidationPolicy(cluster_threshold=0.8, link_slack=0.1, min_cluster=3, max_cluster=3)
    sim = np.array(
        [
            [1.0, 0.85, 0.82, 0.81, 0.1],
            [0.85, 1.0, 0.75, 0.60, 0.1],
            [0.82, 0.75, 1.0, 0.65, 0.1],
            [0.81, 0.60, 0.65, 1.0, 0.1],
            [0.1, 0.1, 0.1, 0.1, 1.0],
        ]
    )
    assert clusters(sim, [0.0, 1.0, 2.0, 3.0, 4.0], pol) == [[0, 1, 2]]
    assert clusters(sim, [0.0, 1.0, 2.0, 3.0, 4.0], ConsolidationPolicy(cluster_threshold=0.9)) == []


def test_several_changed_values_without_a_change_statement_are_another_record() -> None:
    """Templated records (an entry number and a reading both differ) are never superseded on the
    specifics alone; one changed value is."""
    from engram_server.domain.contradictions import judge  # noqa: PLC0415
    from engram_server.domain.specifics import conflicts  # noqa: PLC0415

    a = "The pump reads 40 bar and 70 degrees."
    b = "The pump reads 45 bar and 75 degrees."
    assert judge(a, b, 0.95, conflicts(a, b)).contradiction is None
    e, f = (
        "the reading was 1 bar and then 7",
        "the reading was 7 bar and then 49",
    )  # 1 in the sets, 2 in place
    assert judge(e, f, 0.95, conflicts(e, f)).contradiction is None
    g, h = "Tank pressure is 40 bar at 九点半.", "Tank pressure is 45 bar at 十点."  # Chinese times count too
    assert judge(g, h, 0.95, conflicts(g, h)).contradiction is None
    c = "The pump near the tank reads 40 bar."
    d = "The pump near the tank reads 45 bar."
    assert judge(c, d, 0.95, conflicts(c, d)).contradiction is True


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("谢娟不吃海鲜。", "谢娟2024年搬到了北京。"),
        ("Tom does not drink coffee.", "Tom moved to Berlin in 2024."),
        ("The user never works on weekends.", "The user switched to the night shift."),
    ],
)
def test_a_change_statement_does_not_replace_an_unrelated_negation(a: str, b: str) -> None:
    # one side negates something, the other says something else changed: not the same statement
    assert verdict(a, b, 0.75)[0] is not True


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("The user eats meat.", "The user no longer eats meat."),
        ("用户喝咖啡。", "用户现在不再喝咖啡。"),
    ],
)
def test_a_change_statement_negating_the_same_statement_supersedes(a: str, b: str) -> None:
    assert verdict(a, b, 0.85) == (True, Basis.CHANGE_STATEMENT)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("陈明2024年搬到了武汉。", "陈明2018年搬到了广州。"),  # an earlier move: history
        ("Ana moved to Berlin in 2019.", "Ana moved to Lisbon in 2015."),
        ("朱磊在西安的月租是6200元。", "朱磊2020年搬到了西安。"),  # the move agrees with the stored memory
        ("Ana lives in Berlin near the river.", "Ana moved to Berlin last year."),
    ],
)
def test_a_change_statement_older_than_or_agreeing_with_the_stored_memory_replaces_nothing(
    a: str, b: str
) -> None:
    assert judge(a, b, 0.86, conflicts(a, b)).contradiction is None


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Ana moved to Berlin in 2019.", "Ana moved to Lisbon in 2023."),  # a later move
        ("The launch is scheduled for May 10.", "The launch was rescheduled to May 1."),
        ("张涛2017年搬到了郑州。", "张涛2017年搬到了北京。"),  # the same year: a correction
        ("谢娟住在上海。", "谢娟搬到了北京。"),
        ("The rent is 2400 dollars a month.", "The rent changed to 2600 dollars a month."),
    ],
)
def test_a_later_or_undated_change_statement_still_supersedes(a: str, b: str) -> None:
    v = judge(a, b, 0.86, conflicts(a, b))
    assert v.contradiction is True and v.basis is Basis.CHANGE_STATEMENT
