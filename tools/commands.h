/*
 * commands.h — one function per `pipit` command, each in its own file
 * (tools/cmd_<name>.c), called by main.c with the arguments after the
 * command's name; each returns the process's exit status.
 */
#ifndef PIPIT_TOOLS_COMMANDS_H
#define PIPIT_TOOLS_COMMANDS_H

int cmd_train(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_plan_search(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_sample(int argc, char **argv);
int cmd_schedule(int argc, char **argv);
int cmd_sim(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_plot(int argc, char **argv);

#endif
