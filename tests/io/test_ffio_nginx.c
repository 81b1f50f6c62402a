/*
 * ffio over HTTP against a real web server: Debian's nginx, started by this program as the
 * test user on a free loopback port with a configuration in a scratch directory (mode 0700, as
 * a checkout under mktemp -d or /root is) whose root holds a sharded dataset and a single file.
 * Every record read through ffio_remote_* equals the local reader's; the node cache fetches the
 * shards by URL, verifies and reuses them; a missing URL and a missing shard are named. Skips when
 * nginx or libcurl is missing. argv[1]: a scratch directory (the build directory).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <grp.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ffio.h"
#include "remote_test_util.h"
#include "tap.h"

static const char *const nginx_paths[] = { "/usr/sbin/nginx", "/usr/bin/nginx",
                                           "/usr/local/sbin/nginx" };

static int port_open(int port)
{
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    const int up = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (fd >= 0) close(fd);
    return up;
}

int main(int argc, char **argv)
{
    if (!ffio_http_available()) tap_skip_all("built without libcurl");
    const char *nginx = NULL;
    for (size_t i = 0; i < sizeof nginx_paths / sizeof *nginx_paths; i++)
        if (access(nginx_paths[i], X_OK) == 0) nginx = nginx_paths[i];
    if (!nginx) tap_skip_all("nginx is not installed (Debian package nginx)");

    char dir[4096], p[4400], q[4400], conf[4400], cmd[16384];
    char base[4000];
    /* nginx resolves relative paths against its prefix: give it absolute ones. */
    if (!realpath(argc > 1 ? argv[1] : "/tmp", base)) return 99;
    snprintf(dir, sizeof dir, "%s/ffio_nginx.%ld", base, (long)getpid());
    snprintf(p, sizeof p, "%s/www/ds", dir);
    /* the scratch folder is 0700, as a checkout under mktemp -d or /root is: the server must
     * serve from it all the same */
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' '%s/tmp' && chmod 0700 '%s'", p, dir, dir);
    if (system(cmd) != 0) return 99;
    snprintf(p, sizeof p, "%s/www/ds/coco.ffr", dir);
    snprintf(q, sizeof q, "%s/www/one.ffr", dir);
    if (rt_make_dataset(p, 300, 256 * 1024) < 0 || rt_make_dataset(q, 50, 0) < 0) return 99;

    const int port = rt_free_port();
    snprintf(conf, sizeof conf, "%s/nginx.conf", dir);
    FILE *f = fopen(conf, "w");
    if (!f || port < 0) return 99;
    /* The workers run as the invoking user: started by root, nginx would otherwise run them as
     * www-data, which cannot enter a checkout under a 0700 folder (mktemp -d, /root). Started
     * by anyone else, nginx ignores the line. */
    const struct passwd *pw = getpwuid(geteuid());
    const struct group *gr = getgrgid(getegid());
    if (pw && gr) fprintf(f, "user %s %s;\n", pw->pw_name, gr->gr_name);
    fprintf(f,
            "daemon off;\nworker_processes 1;\npid %s/nginx.pid;\nerror_log %s/error.log;\n"
            "events { worker_connections 64; }\nhttp {\n  access_log off;\n"
            "  client_body_temp_path %s/tmp;\n  proxy_temp_path %s/tmp;\n"
            "  fastcgi_temp_path %s/tmp;\n  uwsgi_temp_path %s/tmp;\n  scgi_temp_path %s/tmp;\n"
            "  server {\n    listen 127.0.0.1:%d;\n    root %s/www;\n  }\n}\n",
            dir, dir, dir, dir, dir, dir, dir, port, dir);
    fclose(f);
    fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
        /* -e: nginx otherwise opens its compiled-in error log, which the test user cannot. */
        snprintf(q, sizeof q, "%s/error.log", dir);
        execl(nginx, nginx, "-p", dir, "-c", conf, "-e", q, (char *)NULL);
        _exit(127);
    }
    int up = 0;
    for (int i = 0; i < 200 && !up; i++) {
        const struct timespec t = { 0, 25 * 1000 * 1000 };
        nanosleep(&t, NULL);
        up = port_open(port);
        int st;
        if (!up && waitpid(pid, &st, WNOHANG) == pid) break;
    }
    if (!up) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        snprintf(cmd, sizeof cmd, "cat '%s/error.log' | sed 's/^/# /'; rm -rf '%s'", dir, dir);
        if (system(cmd) != 0) tap_diag("could not remove %s", dir);
        tap_skip_all("nginx did not start (see its error.log in the build directory)");
    }
    ok(up, "nginx serves %s/www on 127.0.0.1:%d", dir, port);

    struct ffio_http *h;
    ffio_http_create(NULL, &h);
    char url[256], err[1024] = "";
    uint64_t n = 0;
    snprintf(url, sizeof url, "http://127.0.0.1:%d/ds/coco.ffr", port);
    snprintf(p, sizeof p, "%s/www/ds/coco.ffr", dir);
    uint64_t same = rt_compare_remote(h, url, p, &n, err, sizeof err);
    ok(n == 300 && same == 300,
       "a sharded dataset over nginx: %" PRIu64 " of %" PRIu64
       " records equal the local reader's %s",
       same, n, err);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/one.ffr", port);
    snprintf(q, sizeof q, "%s/www/one.ffr", dir);
    same = rt_compare_remote(h, url, q, &n, err, sizeof err);
    ok(n == 50 && same == 50, "a single file over nginx: %" PRIu64 " records equal %s", same, err);

    /* The node cache fetching by URL. */
    struct ffr_cache_source src;
    ffio_http_cache_source(h, &src);
    struct ffr_cache_opts co;
    ffr_cache_opts_default(&co);
    co.source = &src;
    co.durable = 0;
    snprintf(q, sizeof q, "%s/cache", dir);
    struct ffr_cache *c;
    int rc = ffr_cache_open(&c, q, &co, err, sizeof err);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/ds/coco.ffr", port);
    char local[4400];
    struct ffr_reader *sr = NULL;
    ffr_reader_open(&sr, p, NULL, NULL, 0);
    const int shards = (int)ffr_reader_shard_count(sr);
    ffr_reader_close(sr);
    if (rc == 0) rc = ffr_cache_dataset(c, url, local, sizeof local, err, sizeof err);
    ok(rc == shards && shards > 3, "the cache fetches %d shards by URL: %s", rc,
       rc < 0 ? err : local);
    struct ffr_reader *a = NULL;
    ok(rc >= 0 && ffr_reader_open(&a, local, NULL, NULL, 0) == 0 && ffr_reader_count(a) == 300,
       "the cached manifest opens with 300 records");
    ffr_reader_close(a);
    rc = ffr_cache_dataset(c, url, local, sizeof local, err, sizeof err);
    ok(rc == 0, "a second use fetches nothing");
    ffr_cache_close(c);

    /* Missing things are named. */
    struct ffio_remote *rm = NULL;
    snprintf(url, sizeof url, "http://127.0.0.1:%d/nothing.ffr", port);
    rc = ffio_remote_open(h, url, NULL, &rm, err, sizeof err);
    ok(rc == -ENOENT && strstr(err, url) && strstr(err, "404"), "a missing URL: %s", err);
    snprintf(p, sizeof p, "%s/www/ds/coco-00002.ffr", dir);
    snprintf(q, sizeof q, "%s/www/ds/hidden.ffr", dir);
    rename(p, q);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/ds/coco.ffr", port);
    rc = ffio_remote_open(h, url, NULL, &rm, err, sizeof err);
    ok(rc == -ENOENT && strstr(err, "coco-00002.ffr"), "a missing shard is named: %s", err);
    rename(q, p);

    ffio_http_destroy(h);
    kill(pid, SIGQUIT);
    int st = 0;
    waitpid(pid, &st, 0);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) tap_diag("could not remove %s", dir);
    return tap_done();
}
