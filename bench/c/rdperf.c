/* rdperf: a librdkafka producer and consumer for kcompat's benchmarks.
 *
 * The client costs as little CPU per record as librdkafka allows, so a
 * benchmark on a small machine measures the broker, not a Python or JVM
 * client sharing its cores. Built by bench/cores.py (gcc, -lrdkafka from
 * Debian's librdkafka-dev).
 *
 *   rdperf produce BOOTSTRAP TOPIC COUNT SIZE [KEY=VALUE ...]
 *   rdperf consume BOOTSTRAP TOPIC COUNT PARTITIONS [KEY=VALUE ...]
 *
 * KEY=VALUE pairs are librdkafka settings (acks=1, linger.ms=5, ...). Both
 * print one JSON line: records, seconds, records/s, MiB/s, errors; they exit
 * 1 on a setting librdkafka refuses or when fewer records than COUNT were
 * acknowledged or read.
 */
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long delivered, failed;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
    (void)rk; (void)opaque;
    if (m->err) {
        if (failed++ < 5) fprintf(stderr, "delivery failed: %s\n", rd_kafka_err2str(m->err));
    } else {
        delivered++;
    }
}

static rd_kafka_conf_t *config(const char *bootstrap, int argc, char **argv, int first) {
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    for (int i = first; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        if (!eq) { fprintf(stderr, "not KEY=VALUE: %s\n", argv[i]); exit(1); }
        *eq = 0;
        if (rd_kafka_conf_set(conf, argv[i], eq + 1, err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            exit(1);
        }
    }
    return conf;
}

static void report(long records, double secs, long size, long errors) {
    printf("{\"records\": %ld, \"secs\": %.3f, \"rec_s\": %.1f, \"mib_s\": %.2f, "
           "\"errors\": %ld}\n", records, secs, records / secs,
           records * (double)size / secs / 1048576.0, errors);
}

static int produce(const char *bootstrap, const char *topic, long count, long size,
                   int argc, char **argv) {
    char err[512];
    rd_kafka_conf_t *conf = config(bootstrap, argc, argv, 6);
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (!rk) { fprintf(stderr, "%s\n", err); return 1; }
    char *payload = malloc(size);
    for (long i = 0; i < size; i++) payload[i] = 'a' + i % 26;
    double t0 = now_s();
    for (long i = 0; i < count; i++) {
        for (;;) {
            rd_kafka_resp_err_t e = rd_kafka_producev(
                rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_VALUE(payload, size),
                RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
            if (e == RD_KAFKA_RESP_ERR_NO_ERROR) break;
            if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
                fprintf(stderr, "produce: %s\n", rd_kafka_err2str(e));
                return 1;
            }
            rd_kafka_poll(rk, 10);
        }
        if ((i & 1023) == 0) rd_kafka_poll(rk, 0);
    }
    rd_kafka_flush(rk, 120000);
    double secs = now_s() - t0;
    report(delivered, secs, size, failed);
    rd_kafka_destroy(rk);
    return delivered == count ? 0 : 1;
}

static int consume(const char *bootstrap, const char *topic, long count, int partitions,
                   int argc, char **argv) {
    char err[512];
    rd_kafka_conf_t *conf = config(bootstrap, argc, argv, 6);
    rd_kafka_conf_set(conf, "group.id", "rdperf", err, sizeof err);
    rd_kafka_conf_set(conf, "enable.auto.commit", "false", err, sizeof err);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    if (!rk) { fprintf(stderr, "%s\n", err); return 1; }
    rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(partitions);
    for (int p = 0; p < partitions; p++)
        rd_kafka_topic_partition_list_add(parts, topic, p)->offset = RD_KAFKA_OFFSET_BEGINNING;
    rd_kafka_assign(rk, parts);
    long got = 0, bytes = 0, errors = 0;
    double t0 = 0, last = now_s();
    while (got < count && now_s() - last < 30) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 500);
        if (!m) continue;
        if (!m->err) {
            if (!got) t0 = now_s();
            got++;
            bytes += m->len;
            last = now_s();
        } else if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            errors++;
        }
        rd_kafka_message_destroy(m);
    }
    double secs = now_s() - t0;
    report(got, secs, got ? bytes / got : 0, errors);
    rd_kafka_topic_partition_list_destroy(parts);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return got == count ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: rdperf produce BOOTSTRAP TOPIC COUNT SIZE [KEY=VALUE ...]\n"
                        "       rdperf consume BOOTSTRAP TOPIC COUNT PARTITIONS [KEY=VALUE ...]\n");
        return 2;
    }
    long count = atol(argv[4]);
    if (!strcmp(argv[1], "produce")) return produce(argv[2], argv[3], count, atol(argv[5]), argc, argv);
    if (!strcmp(argv[1], "consume")) return consume(argv[2], argv[3], count, atoi(argv[5]), argc, argv);
    fprintf(stderr, "unknown command %s\n", argv[1]);
    return 2;
}
