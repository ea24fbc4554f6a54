"""Which of librdkafka 2.15.1's tests the suite runs, which it leaves out and why,
and the notes that explain a result in FINDINGS.md.

``BROKER_TESTS``: every test number of ``tests/test.c`` with at least one test not
flagged ``TEST_F_LOCAL`` (that is, one that talks to the broker in test.conf).
The runner itself still decides per test: ``-L`` drops the broker-less variants
of a number, ``-E`` the sockem ones (a socket emulator the suite is built
without), ``-V 4.4.0`` the ones for other broker versions, and a test whose
needs are not met (SASL, SSL, a rack) skips itself, which the table shows with
its reason. ``NOT_RUN``: numbers left out here, each named in ``SKIPPED_GROUPS``.
"""

from __future__ import annotations

BROKER_TESTS = (
    "0001 0002 0003 0005 0007 0008 0011 0012 0013 0014 0015 0016 0017 0018 0019 0020 "
    "0021 0022 0026 0028 0029 0030 0031 0033 0034 0035 0036 0038 0039 0040 0041 0042 "
    "0044 0045 0047 0048 0049 0050 0051 0052 0053 0054 0055 0056 0057 0059 0060 0061 "
    "0063 0064 0065 0067 0068 0069 0070 0073 0075 0076 0077 0081 0082 0083 0084 0085 "
    "0086 0088 0089 0090 0091 0092 0093 0094 0097 0098 0099 0101 0102 0103 0107 0109 "
    "0110 0111 0112 0113 0114 0115 0118 0119 0122 0123 0125 0126 0127 0129 0130 0132 "
    "0135 0137 0139 0140 0142 0150 0170 0171 0172 0173 0174 0175 0176 0177 0178 0179 "
    "0180 0181 0184 0185 0190").split()

#: (group, why): left out of every run
SKIPPED_GROUPS: list[tuple[str, str]] = [
    ("0049, 0068, 0075, 0076 (remote), 0088, 0094",
     "sockem tests: they cut and delay the client's socket with librdkafka's socket "
     "emulator (`-E`); not run"),
    ("0103 `ak23` scenario", "a Kafka 2.3 broker; the `default` half runs"),
    ("0190", "manual test (client telemetry against a broker with a metrics plugin)"),
    ("0097, 0126, 0135, 0142",
     "SSL / SASL / OAUTHBEARER: the build has no SSL or SASL and the brokers listen "
     "PLAINTEXT; these run and skip themselves (shown as skip)"),
    ("0053, 0098, 0101, 0110", "need RapidJSON (rapidjson-dev) at build time to check the "
     "statistics JSON; the build has none and they skip themselves (shown as skip)"),
    ("0089, 0091, 0185", "max.poll.interval.ms tests (they wait out poll intervals); "
     "left out of the full run for time; run alone (`--tests 0089,0091,0185 --results "
     "...`) on one kcompat node and on Kafka 4.4.0 all three pass on both"),
    ("0038", "performance test (produces and consumes a lot); left out on this shared "
     "2-core machine"),
]

#: librdkafka's `noautocreate` scenario (brokers with auto.create.topics.enable=false):
#: run in a pass of their own (``run.py --scenario``) against brokers set up so
NOAUTOCREATE_TESTS = ("0045_subscribe_update_topic_remove",
                      "0045_subscribe_update_non_exist_and_partchange",
                      "0107_topic_recreate", "0111_delay_create_topics")
NOAUTOCREATE_NUMBERS = ["0045", "0107", "0111"]

NOT_RUN = {"0049", "0068", "0075", "0076", "0088", "0094", "0107", "0111", "0190",
           "0089", "0091", "0185", "0038"}

#: the first, small set (issue 32 item 4: get the harness right on it)
FIRST = [n for n in BROKER_TESTS if n <= "0030"]

#: what the last full run found, under the table (hand-written, kept by --findings)
FOUND = (
    "What it found (2026-11-30, librdkafka 2.15.1, classic consumer protocol): no test "
    "passes on Apache Kafka 4.4.0 and fails on kcompat, on one node or on three brokers "
    "at RF 3; no kcompat broker logged an error or a traceback during the runs. The "
    "share-consumer tests (0170-0184: subscription, acknowledgement modes, commit "
    "sync/async, concurrency, groups, close and destroy, config, topic deletion and "
    "re-creation) pass on all three. The failures on every side are set by the "
    "environment (0064: SSL in a build without it; 0103, 0107, 0111 on one node: RF 3 "
    "topics) or by timing (0118, see its note). Tests that need Kafka's scripts (0052, "
    "0077: kafka-topics; 0109, 0115, 0119: kafka-acls) run Kafka 4.4.0's own tools "
    "against each side, kcompat's too. Runs of their own (`--results` files, same "
    "settings unless said): 0118 with group.initial.rebalance.delay.ms=3000 passes on one "
    "kcompat node, three kcompat brokers and Kafka; 0089, 0091, 0185 pass on one kcompat "
    "node and on Kafka; with the KIP-848 consumer protocol (`--group-protocol consumer`) "
    "0018, 0029, 0030, 0033, 0045 (3 tests), 0050, 0051, 0056, 0069, 0102, 0113, 0122, "
    "0130 pass on one kcompat node and on Kafka, 0132 skips itself on both (classic "
    "assignors only) and 0118 passes on kcompat and fails on Kafka, the timing of its "
    "note. With the KIP-848 protocol across every test that uses a consumer group (38 "
    "numbers, 2026-12-01, one kcompat node, three kcompat brokers and Kafka; the table "
    "after this section): one difference, 0081_admin's DeleteConsumerGroupOffsets beside "
    "a subscribed consumer, which kcompat answered GROUP_ID_NOT_FOUND on both sides; "
    "fixed in 3e834cd, after which 0081 passes on both.")

#: test name -> why its result is what it is (rows the table explains)
NOTES: dict[str, str] = {
    "0028_long_topicnames": "librdkafka marks it a known issue (its #529); the runner "
                            "skips known issues",
    "0047_partial_buf_tmout": "librdkafka marks it a known issue; the runner skips known "
                              "issues",
    "0045_subscribe_update_topic_remove": "`noautocreate` scenario",
    "0045_subscribe_update_non_exist_and_partchange": "`noautocreate` scenario",
    "0107_topic_recreate": "`noautocreate` scenario; creates RF 3 topics (one node "
                           "answers INVALID_REPLICATION_FACTOR)",
    "0111_delay_create_topics": "`noautocreate` scenario; creates RF 3 topics (one node "
                                "answers INVALID_REPLICATION_FACTOR)",
    "0064_interceptors": "sets security.protocol=ssl, which this build (no SSL) refuses: "
                         "fails before it reaches a broker",
    "0103_transactions": "creates its topics at replication factor 3: one node answers "
                         "INVALID_REPLICATION_FACTOR (Kafka and kcompat alike)",
    "0118_commit_rebalance": "timing: passes only if both consumers join the first "
                             "generation; with group.initial.rebalance.delay.ms=0 (this "
                             "run) Kafka and the kcompat cluster form it with one member "
                             "and the commit the test expects to fail succeeds; with "
                             "Kafka's default 3000 (librdkafka's test brokers) it passes "
                             "on all three (`--set group.initial.rebalance.delay.ms=3000`)",
}


def select(spec: str) -> list[str]:
    """'all', 'first' or comma-separated test numbers -> the numbers to run."""
    if spec == "all":
        return [n for n in BROKER_TESTS if n not in NOT_RUN]
    if spec == "first":
        return [n for n in FIRST if n not in NOT_RUN]
    numbers = [n.strip().zfill(4) for n in spec.split(",") if n.strip()]
    unknown = [n for n in numbers if n not in BROKER_TESTS]
    if unknown:
        raise SystemExit(f"not broker tests of librdkafka's suite: {', '.join(unknown)}")
    return numbers
