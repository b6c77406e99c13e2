/*
 * kafka-mock -- a Kafka cluster for tests: librdkafka's mock cluster
 * (rdkafka_mock.h), which speaks the real Kafka protocol over TCP.
 *
 * usage: kafka-mock [--brokers N] [--partitions P] [TOPIC...]
 *
 * Creates the cluster and the given topics (P partitions each, default 4),
 * prints "bootstrap HOST:PORT,..." on stdout, then reads commands from
 * stdin, one per line, answering "ok" (or "error ...") to each:
 *   down               every broker down (connections closed, refused)
 *   up                 every broker up again
 *   topic NAME P       create a topic with P partitions
 *   quit               exit (so does EOF on stdin, or a signal)
 */
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int set_brokers(rd_kafka_mock_cluster_t *mc, int n, int up)
{
    for (int id = 1; id <= n; id++) {
        rd_kafka_resp_err_t e =
            up ? rd_kafka_mock_broker_set_up(mc, id) : rd_kafka_mock_broker_set_down(mc, id);
        if (e)
            return (int)e;
    }
    return 0;
}

static int command(rd_kafka_mock_cluster_t *mc, int brokers, char *line)
{
    char name[256];
    int parts;
    if (strncmp(line, "down", 4) == 0)
        return set_brokers(mc, brokers, 0);
    if (strncmp(line, "up", 2) == 0)
        return set_brokers(mc, brokers, 1);
    if (sscanf(line, "topic %255s %d", name, &parts) == 2)
        return (int)rd_kafka_mock_topic_create(mc, name, parts, 1);
    return -1;
}

int main(int argc, char **argv)
{
    int brokers = 1, parts = 4, i = 1;
    for (; i + 1 < argc && argv[i][0] == '-'; i += 2) {
        if (strcmp(argv[i], "--brokers") == 0)
            brokers = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--partitions") == 0)
            parts = atoi(argv[i + 1]);
    }
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "log_level", "2", err, sizeof(err));
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
    if (!rk) {
        fprintf(stderr, "kafka-mock: %s\n", err);
        return 1;
    }
    rd_kafka_mock_cluster_t *mc = rd_kafka_mock_cluster_new(rk, brokers);
    if (!mc) {
        fprintf(stderr, "kafka-mock: cannot create the mock cluster\n");
        return 1;
    }
    for (; i < argc; i++)
        rd_kafka_mock_topic_create(mc, argv[i], parts, 1);
    printf("bootstrap %s\n", rd_kafka_mock_cluster_bootstraps(mc));
    fflush(stdout);
    char line[512];
    while (fgets(line, sizeof(line), stdin) && strncmp(line, "quit", 4) != 0) {
        int e = command(mc, brokers, line);
        printf(e ? "error %d\n" : "ok\n", e);
        fflush(stdout);
    }
    rd_kafka_mock_cluster_destroy(mc);
    rd_kafka_destroy(rk);
    return 0;
}
