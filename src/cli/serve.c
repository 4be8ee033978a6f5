/* serve.c: `roifs serve [--listen ADDR:PORT] [--token-file F] [--cors ORIGINS] [--tls-cert F
 * --tls-key F] [--listings] [-d] CONFIG`: the tree a mount presents, over HTTP (src/serve/,
 * docs/serve.md), in the foreground until SIGINT or SIGTERM. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../serve/serve.h"
#include "cli.h"

#define DEFAULT_LISTEN "127.0.0.1:8080"
#define SERVE_THREADS  8 /* the engine's open of a cached chunk makes a few system calls */
#define TOKEN_MAX      4096
/* [process] retry_after when the configuration leaves it unset: a viewer asks for a failed
 * ROI's tiles again and again, each ask would run it (docs/configuration.md) */
#define SERVE_RETRY_AFTER 10.0

struct serve_args {
    const char *listen, *token_file, *cors, *cert, *key, *config;
    bool debug, listings;
};

enum { OPT_LISTEN = 256, OPT_TOKEN, OPT_CORS, OPT_CERT, OPT_KEY, OPT_LISTINGS };

static int parse_serve_args(int argc, char **argv, struct serve_args *a)
{
    static const struct option opts[] = {{"listen", required_argument, NULL, OPT_LISTEN},
                                         {"token-file", required_argument, NULL, OPT_TOKEN},
                                         {"cors", required_argument, NULL, OPT_CORS},
                                         {"tls-cert", required_argument, NULL, OPT_CERT},
                                         {"tls-key", required_argument, NULL, OPT_KEY},
                                         {"listings", no_argument, NULL, OPT_LISTINGS},
                                         {"debug", no_argument, NULL, 'd'},
                                         {NULL, 0, NULL, 0}};
    memset(a, 0, sizeof *a);
    a->listen = DEFAULT_LISTEN;
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, ":d", opts, NULL)) != -1) {
        switch (c) {
        case OPT_LISTEN:
            a->listen = optarg;
            break;
        case OPT_TOKEN:
            a->token_file = optarg;
            break;
        case OPT_CORS:
            a->cors = optarg;
            break;
        case OPT_CERT:
            a->cert = optarg;
            break;
        case OPT_KEY:
            a->key = optarg;
            break;
        case OPT_LISTINGS:
            a->listings = true;
            break;
        case 'd':
            a->debug = true;
            break;
        case ':':
            return cli_usage_error("serve: option '%s' needs a value", argv[optind - 1]);
        default:
            return cli_usage_error("serve: unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind != argc - 1)
        return cli_usage_error(optind >= argc ? "serve needs CONFIG" : "serve takes one CONFIG");
    a->config = argv[optind];
    if (!a->cert != !a->key)
        return cli_usage_error("serve: --tls-cert and --tls-key go together");
    if (a->cors && !a->cors[0])
        return cli_usage_error("serve: --cors needs origins (a comma list, or *)");
    return 0;
}

/* The bearer token in path: refused when its group or others may read it. 0 or EXIT_USAGE. */
static int read_token(const char *path, char **token)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        fprintf(stderr, "roifs: %s: %s\n", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return EXIT_USAGE;
    }
    if (!S_ISREG(st.st_mode) || (st.st_mode & 077)) {
        fprintf(stderr,
                "roifs: %s: %s; the token file must be readable by its owner only (chmod 600)\n",
                path, S_ISREG(st.st_mode) ? "group or others may access it" : "not a file");
        close(fd);
        return EXIT_USAGE;
    }
    char *buf = xmalloc(TOKEN_MAX + 1);
    ssize_t n = read(fd, buf, TOKEN_MAX + 1);
    close(fd);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        n--;
    bool bad = n <= 0 || n > TOKEN_MAX;
    for (ssize_t i = 0; i < n && !bad; i++)
        bad = buf[i] <= ' ' || buf[i] == 0x7f;
    if (bad) {
        fprintf(stderr,
                "roifs: %s: no token there (one line of printable characters, no spaces, "
                "at most %d)\n",
                path, TOKEN_MAX);
        free(buf);
        return EXIT_USAGE;
    }
    buf[n] = '\0';
    *token = buf;
    return 0;
}

static int read_pem(const char *path, char **text)
{
    size_t len;
    int r = file_read_all(path, text, &len);
    if (r < 0) {
        fprintf(stderr, "roifs: %s: %s\n", path, file_strerror(r));
        return EXIT_USAGE;
    }
    return 0;
}

/* The set with the status file and serve's retry_after: 0, EXIT_USAGE or EXIT_RUNTIME. */
static int open_arrays(struct task *t, struct arrayset **s)
{
    struct errbuf err = {{0}};
    struct arrayset_opts o = {.status_file = true, .retry_after_unset = SERVE_RETRY_AFTER};
    int r = arrayset_open(t, &o, s, &err);
    if (r < 0) {
        *s = NULL;
        fprintf(stderr, "roifs: %s\n", err.msg);
        return r == -EINVAL ? EXIT_USAGE : EXIT_RUNTIME;
    }
    return 0;
}

int cmd_serve(int argc, char **argv)
{
    struct serve_args a;
    int r = parse_serve_args(argc, argv, &a);
    if (r)
        return r;
    struct serve_opts o = {.cors = a.cors, .threads = SERVE_THREADS, .listings = a.listings};
    char *token = NULL, *cert = NULL, *key = NULL;
    struct task *t = NULL;
    struct arrayset *s = NULL;
    if (serve_parse_listen(a.listen, &o.addr) < 0) {
        r = cli_usage_error("serve: --listen needs ADDR:PORT (127.0.0.1:8080, [::1]:8080), "
                            "not '%s'",
                            a.listen);
        goto out;
    }
    if ((a.token_file && (r = read_token(a.token_file, &token))) ||
        (a.cert && ((r = read_pem(a.cert, &cert)) || (r = read_pem(a.key, &key)))))
        goto out;
    o.token = token;
    o.tls_cert = cert;
    o.tls_key = key;
    if ((r = cli_load_task(a.config, &t)) || (r = open_arrays(t, &s)))
        goto out;
    if (t->cfg.log_path && log_open_file(t->cfg.log_path, a.debug) < 0) {
        fprintf(stderr, "roifs: %s: cannot open the log: %s\n", t->cfg.log_path, strerror(errno));
        r = EXIT_USAGE;
        goto out;
    }
    if (!t->cfg.log_path)
        log_open_stderr(a.debug);
    /* Every thread (engines, server) leaves the stop signals to serve_run's sigwait. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    struct errbuf err = {{0}};
    if (serve_run(s, &o, &err) < 0) {
        fprintf(stderr, "roifs: %s: %s\n", a.listen, err.msg);
        r = EXIT_RUNTIME;
    }
out:
    arrayset_close(s);
    task_close(t);
    if (token)
        memset(token, 0, strlen(token));
    free(token);
    free(cert);
    free(key);
    return r;
}
