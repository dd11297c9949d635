// config.h — ps-server's options bound to the roles' option structs
// (config.c), so that main.c only runs the role.
#ifndef PS_MAIN_CONFIG_H
#define PS_MAIN_CONFIG_H

#include "fb/config.h"
#include "ps/ps.h"

// PS_CFG_RUN: the options are good and the process goes on (any other
// value returned below is the exit status).
#define PS_CFG_RUN (-1)

// ps__cfg_load reads ps-server's options into cfg (release with
// fb_config_fini) and acts on --help and --print-config, then sets the
// log level. Returns PS_CFG_RUN, or the exit status: 2 after printing why
// the options were refused, 0 after --help or --print-config.
int ps__cfg_load(struct fb_config *cfg, int argc, char **argv);

// ps__cfg_check checks the rules that tie options together and that the
// table cannot (latency placement needs probing, --http-listen's URL, a
// shard size a multiple of 4), then names the log's role and logs every
// option with its source. Returns PS_CFG_RUN, or 2 after printing why.
int ps__cfg_check(const struct fb_config *cfg);

// ps__cfg_text returns option id's value, or NULL when it is empty (an
// optional path or URL left unset). Borrowed from cfg.
const char *ps__cfg_text(const struct fb_config *cfg, enum fb_opt id);

// ps__cfg_scheduler fills o (PS_SCHEDULER_OPTS_INIT'ed) from cfg.
void ps__cfg_scheduler(const struct fb_config *cfg,
    struct ps_scheduler_opts                  *o);

// ps__cfg_server fills o (PS_SERVER_OPTS_INIT'ed) from cfg and checks
// what a server needs (a scheduler URL, a snapshot dir for
// --snapshot-every). Returns PS_CFG_RUN, or 2 after printing why.
int ps__cfg_server(const struct fb_config *cfg, struct ps_server_opts *o);

#endif // PS_MAIN_CONFIG_H
