"""The specifics extractor and comparer the write gate checks before refusing a duplicate.

These sentences are not the ones in eval/pairs/ (those measure the gate); each test names the class
of specific it covers, in English, Chinese and mixed text."""

from __future__ import annotations

import pytest

from engram_server.domain.specifics import conflicts, content_words, extract, same_words


def kinds(a: str, b: str) -> set[str]:
    return {c.kind for c in conflicts(a, b)}


@pytest.mark.parametrize(
    ("a", "b", "kind"),
    [
        # numbers, amounts, percentages, clock times
        ("The fleet has 40 delivery vans.", "The fleet has 44 delivery vans.", "number"),
        ("The invoice total is $1,250.", "The invoice total is $1,520.", "number"),
        ("Disk usage on node-a is at 91%.", "Disk usage on node-a is at 19%.", "number"),
        ("The call is at 14:00.", "The call is at 15:00.", "number"),
        ("Bring five chairs to the meeting room.", "Bring nine chairs to the meeting room.", "number"),
        ("仓库里还有三百箱矿泉水。", "仓库里还有两百箱矿泉水。", "number"),
        ("他的年薪是二十五万元。", "他的年薪是三十五万元。", "number"),
        ("晚上八点半出发去机场。", "晚上九点半出发去机场。", "number"),
        ("转化率是百分之十二。", "转化率是百分之二十一。", "number"),
        # dates: month and weekday names across languages, ISO dates
        ("The lease ends in August.", "The lease ends in September.", "date"),
        ("Garbage is collected on Tuesdays.", "Garbage is collected on Wednesdays.", "date"),
        ("签证在九月到期。", "签证在十月到期。", "date"),
        ("每周三下午打羽毛球。", "每周四下午打羽毛球。", "date"),
        ("Launch is set for 2026-09-14.", "Launch is set for 2026-09-15.", "number"),
        # identifiers
        ("Bug BUG-4410 blocks the release.", "Bug BUG-4401 blocks the release.", "identifier"),
        ("Deploy build v2.8.0 to canary.", "Deploy build v2.8.1 to canary.", "identifier"),
        ("Page alerts go to sre@example.org.", "Page alerts go to dev@example.org.", "identifier"),
        ("把 worker-7 从集群里摘掉。", "把 worker-9 从集群里摘掉。", "identifier"),
        # names (people, places) within one script
        ("Hannah booked the flight to Oslo.", "Marcus booked the flight to Oslo.", "name"),
        ("The offsite will be in Porto.", "The offsite will be in Seville.", "name"),
        ("周杰负责这次数据迁移。", "王强负责这次数据迁移。", "name"),
        ("团建去了厦门。", "团建去了青岛。", "name"),
        # negation
        ("The user likes jazz.", "The user doesn't like jazz.", "negation"),
        ("Ravi has finished the report.", "Ravi has not finished the report.", "negation"),
        ("Never push directly to main.", "Always push directly to main.", "negation"),
        ("用户会开车。", "用户不会开车。", "negation"),
        ("小李去过日本。", "小李没去过日本。", "negation"),
    ],
)
def test_a_changed_specific_is_a_conflict(a: str, b: str, kind: str) -> None:
    assert kind in kinds(a, b)
    assert kind in kinds(b, a)  # symmetric


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Hannah booked the flight to Oslo.", "The flight to Oslo was booked by Hannah."),
        ("In 2024, the team moved to Kraków.", "The team moved to Kraków in 2024."),
        ("Mia's anniversary is on May 4.", "Mia celebrates her anniversary on May 4."),
        ("The user doesn't drink alcohol.", "The user does not drink alcohol."),
        ("Rotate the API keys every 90 days.", "Every 90 days, rotate the API keys."),
        ("The rent of $1,250 is due on the 1st.", "On the 1st, the rent of $1250 is due."),
        ("周杰负责这次数据迁移。", "这次数据迁移由周杰负责。"),
        ("仓库里还有三百箱矿泉水。", "仓库里的矿泉水还有三百箱。"),
        ("每周三下午打羽毛球。", "羽毛球在每周三下午打。"),
        ("用户不吃香菜。", "用户是不吃香菜的。"),
        ("把 worker-7 从集群里摘掉。", "从集群里把 worker-7 摘掉。"),
        # across languages: the script-neutral specifics agree (names are not compared)
        ("The clinic opens at 8:30 on Mondays.", "诊所每周一8:30开门。"),
        ("Sophie has three cats.", "苏菲养了三只猫。"),
        ("The visa expires in October.", "签证十月到期。"),
        ("Ticket OPS-77 is not fixed yet.", "工单 OPS-77 还没修好。"),
    ],
)
def test_a_restatement_has_no_conflict(a: str, b: str) -> None:
    assert conflicts(a, b) == []
    assert conflicts(b, a) == []


def test_values_are_normalised() -> None:
    assert extract("The rent is $2,400.").numbers == {"2400": 1}
    assert extract("房租是两千四百元。").numbers == {"2400": 1}
    assert extract("九点半开会").numbers == {"9:30": 1}
    assert extract("Meet at 9:30.").numbers == {"9:30": 1}
    assert set(extract("The review is on April 14.").dates) == {"month:4"}
    assert set(extract("评审在四月十四日。").dates) == {"month:4"}
    assert set(extract("评审在四月十四日。").numbers) == {"14"}
    assert set(extract("每周一例会").dates) == {"weekday:1"}
    assert set(extract("Weekly sync every Monday").dates) == {"weekday:1"}
    assert set(extract("二〇二六年").numbers) == {"2026"}
    assert set(extract("five hundred").numbers) == {"500"}
    assert set(extract("twenty-five").numbers) == {"25"}
    assert set(extract("Order #58231 shipped.").numbers) == {"58231"}
    assert set(extract("ticket JIRA-2817").identifiers) == {"jira-2817"}


def test_words_that_only_look_like_specifics_are_not() -> None:
    # "一起", "统一", "一些" are words, not the number one; "may" is a verb unless capitalised.
    assert not extract("我们一起统一一些配置。").numbers
    assert not extract("It may rain.").dates
    # 不过 / 特别 / 无线 / 非常 do not negate.
    assert extract("不过他特别喜欢无线耳机，非常好用。").negations == 0
    assert extract("The user does not eat meat.").negations == 1
    assert extract("用户不吃肉。").negations == 1


def test_conflict_lists_the_values_each_side_has() -> None:
    (c,) = conflicts("Invoice 4471 was paid.", "Invoice 4472 was paid.")
    assert (c.kind, c.existing, c.new) == ("number", ("4471",), ("4472",))
    (n,) = conflicts("用户喜欢猫。", "用户不喜欢猫。")
    assert (n.kind, n.existing, n.new) == ("negation", ("0",), ("1",))


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (
            "The user wants brief emails without attachments.",
            "The user wants emails that are brief and have no attachments.",
        ),
        ("Mara eats fish, not meat.", "Mara doesn't eat meat; she eats fish."),
        ("Deploys happen on Fridays.", "On Fridays, deploys happen."),
        ("用户希望代码评审简短友好。", "代码评审，用户希望简短友好。"),
        # an event verb in place of "is" (failed before: "happens" was a content word)
        ("The retro is on the last Friday.", "The retro happens on the last Friday."),
        ("The outage was on Monday night.", "On Monday night the outage occurred."),
    ],
)
def test_reworded_sentences_have_the_same_content_words(a: str, b: str) -> None:
    assert same_words(a, b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("The user wants brief emails.", "The user wants brief emails with attachments."),  # added content
        ("The user can swim.", "The user must swim."),  # modals are content
        ("Mara eats fish.", "Mara cooks fish."),
        ("用户喜欢猫。", "用户喜欢狗。"),
        ("The outage happened on Monday.", "The release happened on Monday."),  # another event
        ("", ""),  # no content words: never "the same"
    ],
)
def test_changed_content_words_are_not_the_same(a: str, b: str) -> None:
    assert not same_words(a, b)


def test_content_words_drop_grammar_and_negation_cues() -> None:
    assert content_words("The user doesn't drink coffee.") == {"user", "drink", "coffee"}
    assert content_words("用户不喜欢吃辣。") == content_words("用户喜欢吃辣。")  # negation is compared apart


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("The shipment goes from Rotterdam to Hamburg.", "The shipment goes from Hamburg to Rotterdam."),
        ("Clara reports to Martin.", "Martin reports to Clara."),
        ("王磊把合同寄给了赵敏。", "赵敏把合同寄给了王磊。"),
        ("航班从广州飞往成都。", "航班从成都飞往广州。"),
    ],
)
def test_two_names_trading_places_is_an_order_conflict(a: str, b: str) -> None:
    found = [c for c in conflicts(a, b) if c.kind == "order"]
    assert len(found) == 1
    assert found[0].existing == tuple(reversed(found[0].new))


@pytest.mark.parametrize(
    ("a", "b"),
    [
        # coordinated names are one group: their order is free
        ("Clara and Martin own the cabin.", "Martin and Clara own the cabin."),
        ("王磊和赵敏负责这个项目。", "赵敏和王磊负责这个项目。"),
        # passive voice in one text: the roles are kept by "by"
        ("Clara interviewed Martin.", "Martin was interviewed by Clara."),
        # a fronted phrase moves one name past the others: no two names trade places
        ("In Lisbon Clara met Martin.", "Clara met Martin in Lisbon."),
        # one shared name only
        ("Clara flew to Lisbon.", "To Lisbon, Clara flew."),
    ],
)
def test_reordered_restatements_have_no_order_conflict(a: str, b: str) -> None:
    assert "order" not in kinds(a, b)


def test_a_verb_jieba_glued_onto_a_name_is_no_other_person() -> None:
    """jieba reads 张伟选了 as one name (张伟选): the same person choosing with a synonym verb is no
    name conflict, and what differs beside the glued verb is still found."""
    assert conflicts("张伟选了蓝色的窗帘。", "张伟挑了蓝色的窗帘。") == []
    assert [c.kind for c in conflicts("张伟选了红色的窗帘。", "张伟挑了蓝色的窗帘。")] == ["term"]
    assert [
        (c.kind, c.existing, c.new) for c in conflicts("刘洋选了红色的窗帘。", "张伟选了红色的窗帘。")
    ] == [("name", ("刘洋",), ("张伟",))]


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("马俊的手机是华为 Mate 60。", "马俊用的是华为 Mate 60。"),  # jieba glues the verb on: 马俊用
        ("彭丽每周二晚上上瑜伽课。", "每周二晚上，彭丽都去上瑜伽课。"),  # jieba cuts across it: 彭 | 丽都
    ],
)
def test_a_chinese_name_cut_differently_is_the_same_person(a: str, b: str) -> None:
    assert not [c for c in conflicts(a, b) if c.kind == "name"]
    assert not [c for c in conflicts(b, a) if c.kind == "name"]


@pytest.mark.parametrize(
    ("a", "b", "kind"),
    [
        ("马俊用的是华为手机。", "马军用的是华为手机。", "name"),  # another person, glued the same way
        ("彭丽都去上瑜伽课。", "彭莉都去上瑜伽课。", "name"),
        ("李娜和王芳去了北京。", "李娜和王方去了北京。", "name"),
        ("孙秀英不吃辣椒。", "吴秀英不吃辣椒。", "name"),  # jieba: 孙 | 秀英 and 吴秀英
    ],
)
def test_another_chinese_name_stays_another_person(a: str, b: str, kind: str) -> None:
    assert kind in [c.kind for c in conflicts(a, b)]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("The commute takes an hour and a half.", "1.5"),
        ("The flight takes one and a half hours.", "1.5"),
        ("Three and a half years at Acme.", "3.5"),
        ("The call lasted half an hour.", "0.5"),
        ("通勤要一个半小时。", "1.5"),
        ("他在上海住了三年半。", "3.5"),
        ("会议开了两个半小时。", "2.5"),
        ("午休半小时。", "0.5"),
    ],
)
def test_a_half_of_a_unit_is_a_number(text: str, value: str) -> None:
    assert list(extract(text).numbers) == [value]


def test_halves_agree_across_languages_and_a_changed_half_conflicts() -> None:
    zh, en = "马俊每天通勤要一个半小时。", "Ma Jun's commute takes an hour and a half each day."
    assert conflicts(zh, en) == []
    assert conflicts("The commute takes an hour and a half.", "The commute takes 1.5 hours.") == []
    assert [c.kind for c in conflicts("通勤要一个半小时。", "通勤要两个半小时。")] == ["number"]
    half, whole = "The call lasted half an hour.", "The call lasted an hour."
    assert [c.kind for c in conflicts(half, whole)] == ["number"]
    # a half that is no amount of a unit stays a word
    assert extract("Half the team works remotely.").numbers == extract("The team works remotely.").numbers
    assert extract("一半的人在远程办公。").numbers == extract("的人在远程办公。").numbers
    assert list(extract("周会九点半开始。").numbers) == ["9:30"]


def test_a_month_short_name_is_a_month_only_where_a_date_is() -> None:
    assert extract("Ma Jun reviewed the draft.").dates == extract("Li Wei reviewed the draft.").dates
    for text in ("Due Jun 5.", "Due 5 Jun 2026.", "Starts in Jun.", "Moved early Mar."):
        assert extract(text).dates, text
    assert [c.kind for c in conflicts("Due Jun 5.", "Due Jul 5.")] == ["date"]


def test_two_chinese_names_cut_differently_trading_roles_is_an_order_conflict() -> None:
    # jieba: 韩雪教 | 曹宇 and 曹宇教 | 韩雪 — the same two people, who teaches whom swapped
    assert [c.kind for c in conflicts("韩雪教曹宇打羽毛球。", "曹宇教韩雪打羽毛球。")] == ["order"]
